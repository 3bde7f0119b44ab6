package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/test/framework/pki"
)

// ControlPlaneOptions choose the optional components.
type ControlPlaneOptions struct {
	ControllerManager bool // rollouts, garbage collection, service-account tokens
	Scheduler         bool
	Kwok              bool // fake kubelets for fleet-scale tests
	KwokNodes         int  // fake nodes created at start (kwok-node-0...)
	// SkipCRDs leaves Brewlet's CRDs out.
	SkipCRDs bool
	// Address serves the API server on this host address instead of loopback: a kubelet
	// node's Gateway, which its pods reach (the LAN does not). Webhook calls then go to a
	// Service's endpoints (pod IPs) rather than its cluster IP (there is no kube-proxy), and
	// anonymous requests are refused.
	Address string
}

// ControlPlane is a real etcd + kube-apiserver (and optional components) on loopback.
type ControlPlane struct {
	*Instance
	Config     *rest.Config
	Client     client.Client
	Scheme     *runtime.Scheme
	Kubeconfig string
	APIServer  *Process
	Etcd       *Process
	// Address is where the API server listens: 127.0.0.1 unless the options name one.
	Address string
	Port    int
	pki     *pki.PKI
	etcdURL string
	opts    ControlPlaneOptions
}

// Scheme returns a scheme with Kubernetes' built-in types, CRDs and Brewlet's API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = apiextensionsv1.AddToScheme(s)
	_ = brewletv1.AddToScheme(s)
	return s
}

// StartControlPlane starts the components and installs Brewlet's generated CRDs. It is
// removed when the test ends.
func StartControlPlane(t TB, opts ControlPlaneOptions) *ControlPlane {
	t.Helper()
	etcdBin, apiBin := Tool(t, "etcd"), Tool(t, "kube-apiserver")
	in := NewInstance(t, "cp")
	cp := &ControlPlane{Instance: in, Scheme: Scheme(), Address: "127.0.0.1", opts: opts}
	var extra []net.IP
	if opts.Address != "" {
		cp.Address = opts.Address
		extra = append(extra, net.ParseIP(opts.Address))
	}
	var err error
	if cp.pki, err = pki.New(filepath.Join(in.Dir, "pki"), extra...); err != nil {
		t.Fatalf("control plane certificates: %v", err)
	}
	if err := cp.startEtcd(t, etcdBin); err != nil {
		t.Fatal(err)
	}
	if err := cp.startAPIServer(t, apiBin); err != nil {
		t.Fatal(err)
	}
	if opts.ControllerManager {
		if err := cp.startControllerManager(t); err != nil {
			t.Fatal(err)
		}
	}
	if opts.Scheduler {
		if err := cp.startScheduler(t); err != nil {
			t.Fatal(err)
		}
	}
	if opts.Kwok {
		if err := cp.startKwok(t, opts.KwokNodes); err != nil {
			t.Fatal(err)
		}
	}
	if !opts.SkipCRDs {
		if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{
			Paths:              []string{filepath.Join(RepoRoot(t), "config", "crd")},
			ErrorIfPathMissing: true,
			Scheme:             cp.Scheme,
		}); err != nil {
			t.Fatalf("install Brewlet CRDs: %v", err)
		}
	}
	return cp
}

func (cp *ControlPlane) startEtcd(t TB, bin string) error {
	client, peer := FreePort(t), FreePort(t)
	url := func(p int) string { return "http://127.0.0.1:" + strconv.Itoa(p) }
	p, err := cp.Start("etcd", nil, bin, "--name=e2e", "--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+url(client), "--advertise-client-urls="+url(client),
		"--listen-peer-urls="+url(peer), "--initial-advertise-peer-urls="+url(peer),
		"--initial-cluster=e2e="+url(peer), "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return err
	}
	cp.Etcd, cp.etcdURL = p, url(client)
	return p.WaitReady(60*time.Second, func(ctx context.Context) error {
		return HTTPOK(ctx, http.DefaultClient, url(client)+"/health")
	})
}

func (cp *ControlPlane) startAPIServer(t TB, bin string) error {
	if cp.Port == 0 {
		cp.Port = FreePort(t)
	}
	k := cp.pki
	var extra []string
	if cp.opts.Address != "" {
		extra = append(extra, "--enable-aggregator-routing=true", "--anonymous-auth=false")
	}
	p, err := cp.Start("kube-apiserver", nil, append([]string{bin,
		"--etcd-servers=" + cp.etcdURL,
		"--bind-address=" + cp.Address, "--advertise-address=" + cp.Address, "--secure-port=" + strconv.Itoa(cp.Port),
		// 1.37 refuses a loopback advertise address with the default endpoint reconciler.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + k.Server, "--tls-private-key-file=" + k.SrvKey, "--client-ca-file=" + k.CACert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + k.SAPub, "--service-account-signing-key-file=" + k.SAKey,
		"--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction", "--allow-privileged=true",
		// Logs, exec and port-forward reach real kubelets (StartKubeletNode) with a client
		// certificate, at the node's InternalIP, verifying the kubelet's serving certificate.
		"--kubelet-client-certificate=" + k.KubeletClient, "--kubelet-client-key=" + k.KubeletClientKey,
		"--kubelet-certificate-authority=" + k.CACert, "--kubelet-preferred-address-types=InternalIP",
		"--cert-dir=" + filepath.Join(cp.Dir, "apiserver-certs")}, extra...)...)
	if err != nil {
		return err
	}
	cp.APIServer = p
	cp.Config = &rest.Config{
		Host:            "https://" + net.JoinHostPort(cp.Address, strconv.Itoa(cp.Port)),
		TLSClientConfig: rest.TLSClientConfig{CAFile: k.CACert, CertFile: k.Admin, KeyFile: k.AdmKey},
		QPS:             200, Burst: 400,
	}
	cp.Kubeconfig = filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(cp.Kubeconfig, cp.Config); err != nil {
		return err
	}
	hc, err := cp.httpClient()
	if err != nil {
		return err
	}
	if err := p.WaitReady(180*time.Second, func(ctx context.Context) error {
		return HTTPOK(ctx, hc, cp.Config.Host+"/readyz")
	}); err != nil {
		return err
	}
	cp.Client, err = client.New(cp.Config, client.Options{Scheme: cp.Scheme})
	return err
}

// StopAPIServer stops kube-apiserver (etcd keeps the data), to test disconnected nodes.
func (cp *ControlPlane) StopAPIServer() { cp.APIServer.Stop(15 * time.Second) }

// StartAPIServer starts kube-apiserver again on the same port after StopAPIServer.
func (cp *ControlPlane) StartAPIServer(t TB) {
	t.Helper()
	if err := cp.startAPIServer(t, Tool(t, "kube-apiserver")); err != nil {
		t.Fatal(err)
	}
}

func (cp *ControlPlane) httpClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(cp.pki.CACert)
	if err != nil {
		return nil, err
	}
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(cp.pki.Admin, cp.pki.AdmKey)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}, nil
}

func (cp *ControlPlane) startControllerManager(t TB) error {
	bin, port, kc := Tool(t, "kube-controller-manager"), FreePort(t), cp.Kubeconfig
	p, err := cp.Start("kube-controller-manager", nil, bin, "--kubeconfig="+kc,
		"--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port), "--leader-elect=false",
		"--service-account-private-key-file="+cp.pki.SAKey, "--root-ca-file="+cp.pki.CACert,
		"--use-service-account-credentials=true",
		"--cluster-signing-cert-file="+cp.pki.CACert, "--cluster-signing-key-file="+cp.pki.CAKey,
		"--cert-dir="+filepath.Join(cp.Dir, "kcm-certs"),
		// Its default flexvolume directory is /usr/libexec/kubernetes/..., which it creates.
		"--flex-volume-plugin-dir="+filepath.Join(cp.Dir, "flexvolume"),
		// The default client QPS of 20 caps pod churn at ~20 pods/s.
		"--kube-api-qps=200", "--kube-api-burst=400")
	if err != nil {
		return err
	}
	return p.WaitReady(60*time.Second, func(ctx context.Context) error {
		return HTTPOK(ctx, insecureClient, fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
	})
}

func (cp *ControlPlane) startScheduler(t TB) error {
	bin, port, kc := Tool(t, "kube-scheduler"), FreePort(t), cp.Kubeconfig
	p, err := cp.Start("kube-scheduler", nil, bin, "--kubeconfig="+kc,
		"--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port), "--leader-elect=false",
		"--kube-api-qps=200", "--kube-api-burst=400")
	if err != nil {
		return err
	}
	return p.WaitReady(60*time.Second, func(ctx context.Context) error {
		return HTTPOK(ctx, insecureClient, fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
	})
}

// Kubectl runs the pinned kubectl against this control plane.
func (cp *ControlPlane) Kubectl(t TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(Tool(t, "kubectl"), append([]string{"--kubeconfig=" + cp.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// CanI is kubectl auth can-i args as user, as the API server's authorizer answers it: "yes"
// or "no". The answer is the last line (kubectl warns about cluster-scoped resources
// first), and kubectl's exit status, non-zero for "no", is no error.
func (cp *ControlPlane) CanI(t TB, user string, args ...string) string {
	t.Helper()
	out, _ := cp.Kubectl(t, append([]string{"auth", "can-i", "--as=" + user}, args...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func writeKubeconfig(path string, c *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthority: c.CAFile}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: c.CertFile, ClientKey: c.KeyFile}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "admin"}
	kc.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*kc, path)
}

var insecureClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probes of our own components
}}

// HTTPOK GETs url and fails unless the answer is 200 OK.
func HTTPOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
