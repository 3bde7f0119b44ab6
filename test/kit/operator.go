package kit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"brewlet.sh/brewlet/test/framework"
)

var SetLoggerOnce sync.Once

// RunningOperator is one brewlet-operator replica a test started.
type RunningOperator struct {
	Probe, Metrics string
	Stop           func()
}

// StartOperator runs one brewlet-operator replica as its own process under the chart's
// operator RBAC (a token of its service account in ChartNS is its only credential; see
// operatorToken), without pod admission. With leader election it competes for the chart's
// Lease like a real replica (short timings, so that failover takes seconds); without, it
// reconciles at once, beside any other replica (a split brain).
func StartOperator(t *testing.T, cp *framework.ControlPlane, leaderElection bool) *RunningOperator {
	t.Helper()
	return StartOperatorFlags(t, cp, nil, fmt.Sprintf("--leader-elect=%t", leaderElection))
}

// StartOperatorFlags is StartOperator with the chart rendered with chartArgs for its RBAC
// and the operator's own extra flags.
func StartOperatorFlags(t *testing.T, cp *framework.ControlPlane, chartArgs []string, flags ...string) *RunningOperator {
	t.Helper()
	op := StartOperatorProcess(t, cp, operatorToken(t, cp, chartArgs...), ChartNS, append([]string{"--webhook-port=0",
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"}, flags...)...)
	var once sync.Once
	ro := &RunningOperator{Probe: op.ProbeAddr, Metrics: op.MetricsAddr,
		Stop: func() { once.Do(func() { op.StopCleanly(t, 30*time.Second) }) }}
	t.Cleanup(ro.Stop)
	return ro
}

// operatorProcess is the brewlet-operator binary run as its own process, as a Deployment
// replica runs it: its own kubeconfig (a service-account token, nothing of the harness's
// admin credentials), its own ports, its flags from cmd/brewlet-operator.
type operatorProcess struct {
	*framework.Process
	ProbeAddr, MetricsAddr, WebhookAddr string
}

var (
	operatorBinOnce sync.Once
	operatorBin     string
	operatorBinErr  error
)

// buildOperator compiles cmd/brewlet-operator into the repository's bin/ once per test
// binary (go build is incremental; make build writes the same file).
func buildOperator(t *testing.T) string {
	t.Helper()
	operatorBinOnce.Do(func() {
		root := framework.RepoRoot(t)
		operatorBin = filepath.Join(root, "bin", "brewlet-operator")
		cmd := exec.Command("go", "build", "-o", operatorBin, "./cmd/brewlet-operator")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			operatorBinErr = fmt.Errorf("build brewlet-operator: %v\n%s", err, out)
		}
	})
	if operatorBinErr != nil {
		t.Fatal(operatorBinErr)
	}
	return operatorBin
}

// operatorToken installs the chart's operator RBAC (service account, roles, bindings) and
// the admission policies that confine it (the chart rendered with helm and chartArgs,
// nothing else of it) in ChartNS, and returns a fresh token of that service account.
// Objects that exist are kept.
func operatorToken(t *testing.T, cp *framework.ControlPlane, chartArgs ...string) string {
	t.Helper()
	ctx := context.Background()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ChartNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Its RBAC, and the admission policy that confines its workload patches (restarts).
	rbac := map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	// With metrics on: the operator always serves them here, and checks its scrapers'
	// tokens with the API server (TokenReview, SubjectAccessReview).
	for _, o := range ChartMustRender(t, ChartNS, append([]string{"--set", "provisioner.enabled=false", "--set", "metrics.enabled=true"}, chartArgs...)...) {
		if !rbac[o.Kind] || !strings.HasPrefix(o.Name, "brewlet-operator") {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(o.JSON); err != nil {
			t.Fatal(err)
		}
		if err := cp.Client.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s %s: %v", o.Kind, o.Name, err)
		}
	}
	return OperatorSAToken(t, cp)
}

// OperatorSAToken is a fresh token of the chart's operator service account in ChartNS.
func OperatorSAToken(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ChartNS).CreateToken(context.Background(), "brewlet-operator", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// StartOperatorProcess builds and starts brewlet-operator in namespace ns with token as its
// only credential, records it in the control plane's instance (cleanup and the sweep kill
// it by PID; it dies with the test binary) and waits for its /readyz: informers synced and
// the pod admission certificate served.
func StartOperatorProcess(t *testing.T, cp *framework.ControlPlane, token, ns string, extraFlags ...string) *operatorProcess {
	t.Helper()
	bin := buildOperator(t)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cp.Config.Host, CertificateAuthority: cp.Config.CAFile}
	kc.AuthInfos["brewlet-operator"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "brewlet-operator"}
	kc.CurrentContext = "e2e"
	kubeconfig := filepath.Join(cp.Dir, "brewlet-operator.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	addr := func() string { return "127.0.0.1:" + strconv.Itoa(framework.FreePort(t)) }
	op := &operatorProcess{ProbeAddr: addr(), MetricsAddr: addr()}
	webhookPort := framework.FreePort(t)
	op.WebhookAddr = "127.0.0.1:" + strconv.Itoa(webhookPort)
	// The caller's flags come last and win (flag parsing keeps the last value).
	p, err := cp.Start("brewlet-operator", nil, append([]string{bin, "--kubeconfig=" + kubeconfig,
		"--metrics-address=" + op.MetricsAddr, "--health-probe-address=" + op.ProbeAddr,
		"--leader-elect=true", "--leader-election-namespace=" + ns, "--leader-election-id=brewlet-operator",
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(webhookPort),
		"--webhook-cert-dir=" + filepath.Join(cp.Dir, "brewlet-operator-certs"), "--webhook-cert-resync=500ms"}, extraFlags...)...)
	if err != nil {
		t.Fatal(err)
	}
	op.Process = p
	if err := p.WaitReady(90*time.Second, func(ctx context.Context) error {
		return framework.HTTPOK(ctx, http.DefaultClient, "http://"+op.ProbeAddr+"/readyz")
	}); err != nil {
		p.Stop(10 * time.Second)
		t.Fatal(err)
	}
	return op
}

// StopCleanly ends the process with SIGTERM (as the kubelet would) and fails t unless it exits
// cleanly within grace: it must not have died on its own before, and must hand back its
// Lease and stop its controllers without being killed.
func (op *operatorProcess) StopCleanly(t *testing.T, grace time.Duration) {
	t.Helper()
	if exited, err := op.Exited(); exited {
		t.Errorf("brewlet-operator exited before the test stopped it: %v", err)
	} else {
		op.Stop(grace)
		if _, err := op.Exited(); err != nil {
			t.Errorf("brewlet-operator did not stop cleanly within %s on SIGTERM: %v", grace, err)
		}
	}
	if t.Failed() {
		t.Logf("---- brewlet-operator log (%s) ----\n%s", op.LogPath, op.Tail(200))
	}
}

// WebhookServes checks that the process serves pod admission over TLS with a certificate
// for host that chains to caPEM (the CA in the certificate Secret and the caBundle).
func (op *operatorProcess) WebhookServes(caPEM []byte, host string) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("no CA certificate in %d bytes", len(caPEM))
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", op.WebhookAddr,
		&tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12})
	if err != nil {
		return err
	}
	return conn.Close()
}
