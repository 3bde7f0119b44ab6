package controlplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/internal/nodepool"
	"brewlet.sh/brewlet/internal/operator"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

const admissionNS = "apps"

// warnings collects the warnings the API server returns (kubectl prints them).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// admissionOperator runs brewlet-operator in-process with pod admission on a loopback
// port, its certificate naming 127.0.0.1, and short certificate lifetimes so that the
// serving certificate (each with a CA of its own) rotates several times while the test runs.
func admissionOperator(t *testing.T, cp *framework.ControlPlane) (port int, metricsAddr string) {
	t.Helper()
	port = framework.FreePort(t)
	ro := startOperatorWith(t, cp, func(o *operator.Options) {
		o.ProbeAddress = "0"
		o.Admission = admission.Options{
			Host: "127.0.0.1", Port: port, CertDir: t.TempDir(), Namespace: "brewlet-system",
			Hosts:        []string{"127.0.0.1"},
			CertValidity: 12 * time.Second, ResyncInterval: 300 * time.Millisecond,
		}
	})
	return port, ro.Metrics
}

// admissionRequests is the operator's count of admission requests it judged.
func admissionRequests(t *testing.T, cp *framework.ControlPlane, metricsAddr string) int {
	t.Helper()
	body, err := kit.ScrapeMetrics(t, cp, metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "brewlet_operator_pod_admission_requests_total{") {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += int(v)
		}
	}
	return n
}

func admissionPod(name, id string, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: admissionNS, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			RuntimeClassName:             ptr.To(vocab.RuntimeClassName),
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
	}
	if id != "" {
		p.Annotations[vocab.AnnotationRuntimeImage] = id
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

func appSC(p *corev1.Pod) *corev1.SecurityContext {
	if p.Spec.Containers[0].SecurityContext == nil {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{}
	}
	return p.Spec.Containers[0].SecurityContext
}

// offersPoolKey is the pool key of the tests' NodeProfiles: under node-restriction.kubernetes.io/,
// as every pool key must be.
const offersPoolKey = vocab.NodeRestrictionPrefix + "pool"

func getProfile(t *testing.T, c client.Client, name string) *brewletv1.NodeProfile {
	t.Helper()
	p := &brewletv1.NodeProfile{}
	kit.Must(t, c.Get(context.Background(), client.ObjectKey{Name: name}, p))
	return p
}

func TestPodAdmission(t *testing.T) {
	// Scheduler and kwok nodes: admitted pods must land only on nodes offering their runtime.
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{Scheduler: true, Kwok: true})
	ctx, c := context.Background(), cp.Client
	// Brewlet's node labels are the agent's to write; here they stand for agents in each
	// state. Pool labels (offersPoolKey) are the administrator's: no node's own identity can
	// set them. The last two nodes are compromised: every label their kubelet or agent can
	// write claims python-3.12 (a forgeable pool label, the old host-changes label, the
	// runtime labels), but they are in no pool offering it.
	for name, labels := range map[string]map[string]string{
		"py-ready":     {offersPoolKey: "general", vocab.LabelRuntime: vocab.LabelValueReady, vocab.RuntimeLabel("python-3.12"): vocab.LabelValueReady},
		"py-on-demand": {offersPoolKey: "general", vocab.LabelRuntime: vocab.LabelValueReady, vocab.RuntimeLabel("python-3.12"): vocab.LabelValueAvailable},
		"ruby-only":    {offersPoolKey: "gpu", vocab.LabelRuntime: vocab.LabelValueReady, vocab.RuntimeLabel("ruby-3"): vocab.LabelValueReady},
		"no-brewlet":   nil,
		"forged-in-no-pool": {offersPoolKey: "unpooled", "pool.example/name": "general", vocab.LegacyLabelHostChanges: vocab.LabelValuePresent,
			vocab.LabelRuntime: vocab.LabelValueReady, vocab.RuntimeLabel("python-3.12"): vocab.LabelValueReady},
		"forged-in-gpu": {offersPoolKey: "gpu", vocab.LabelRuntime: vocab.LabelValueReady, vocab.RuntimeLabel("python-3.12"): vocab.LabelValueReady},
	} {
		if err := cp.AddFakeNode(ctx, name, labels); err != nil {
			t.Fatal(err)
		}
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: admissionNS}},
		// No controller-manager here: the ServiceAccount admission plugin needs the
		// namespace's default account to exist.
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: admissionNS}},
		// What the NodeProfile controller creates.
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: vocab.RuntimeClassName}, Handler: vocab.RuntimeClassName,
			Scheduling: &nodev1.Scheduling{NodeSelector: map[string]string{vocab.LabelRuntime: vocab.LabelValueReady}}},
	} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// The Secret as an earlier version left it, with the CA's private key in it: the
	// operator migrates it to CAs whose keys are never kept.
	legacyCA := legacyAdmissionSecret(t, c)
	port, metricsAddr := admissionOperator(t, cp)

	installWebhook(t, c, port)
	kit.Eventually(t, 30*time.Second, "the earlier version's CA and its key gone from the Secret and the caBundle", func() (bool, string) {
		if problem, err := admissionSecretProblem(ctx, c, legacyCA); err != nil || problem != "" {
			return false, fmt.Sprint(problem, err)
		}
		sec, cur := &corev1.Secret{}, &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: admission.SecretName}, sec); err != nil {
			return false, err.Error()
		}
		if err := c.Get(ctx, types.NamespacedName{Name: admission.ConfigurationName}, cur); err != nil {
			return false, err.Error()
		}
		legacyPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: legacyCA.Raw})
		_, caKey := sec.Data["ca.key"]
		return !caKey && !bytes.Contains(cur.Webhooks[0].ClientConfig.CABundle, legacyPEM) &&
				bytes.Equal(cur.Webhooks[0].ClientConfig.CABundle, sec.Data[admission.KeyCABundle]),
			fmt.Sprintf("ca.key present %v, legacy CA in the caBundle %v", caKey, bytes.Contains(cur.Webhooks[0].ClientConfig.CABundle, legacyPEM))
	})

	// RuntimeImages approved (and one revoked) by the operator's own RuntimeImage controller.
	py := kit.RuntimeImage("python-3.12", "registry.example/runtimes/python@"+kit.GoodDigest)
	py.Spec.User = brewletv1.RuntimeUser{UID: 10001, GID: 10002}
	ruby := kit.RuntimeImage("ruby-3", "registry.example/runtimes/ruby@"+kit.GoodDigest)
	ruby.Spec.Revoked = true
	// Approved, but offered to no pool.
	node := kit.RuntimeImage("node-20", "registry.example/runtimes/node@"+kit.GoodDigest)
	for _, ri := range []*brewletv1.RuntimeImage{py, ruby, node} {
		if err := c.Create(ctx, ri); err != nil {
			t.Fatal(err)
		}
	}
	for pool, id := range map[string]string{"general": "python-3.12", "gpu": "ruby-3"} {
		kit.Must(t, c.Create(ctx, &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: brewletv1.NodeProfileSpec{
			NodePool: brewletv1.NodePool{Key: offersPoolKey, Names: []string{pool}}, RuntimeImages: []brewletv1.OfferedRuntime{{ID: id}}}}))
	}
	kit.Eventually(t, 30*time.Second, "Approved written by the operator", func() (bool, string) {
		a, r, n := approved(getRI(t, c, "python-3.12")), approved(getRI(t, c, "ruby-3")), approved(getRI(t, c, "node-20"))
		return a != nil && a.Status == metav1.ConditionTrue && r != nil && r.Status == metav1.ConditionFalse && n != nil && n.Status == metav1.ConditionTrue, fmt.Sprint(a, r, n)
	})

	warn := &warnings{}
	wcfg := rest.CopyConfig(cp.Config)
	wcfg.WarningHandler = warn
	wc, err := client.New(wcfg, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The API server loads webhook configurations asynchronously.
	kit.Eventually(t, 30*time.Second, "webhook in effect", func() (bool, string) {
		err := wc.Create(ctx, admissionPod("probe", ""))
		if err == nil {
			_ = c.Delete(ctx, admissionPod("probe", ""))
		}
		return err != nil && strings.Contains(err.Error(), string(vocab.ReasonRuntimeImageRequired)), fmt.Sprint(err)
	})

	t.Run("admitted with the runtime's user and the affinity in every term", func(t *testing.T) {
		zone := corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
		pod := admissionPod("ok", "python-3.12", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{zone}},
					{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}},
				}}}}
		})
		if err := wc.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		got := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			t.Fatal(err)
		}
		s := got.Spec.SecurityContext
		if s == nil || s.RunAsUser == nil || *s.RunAsUser != 10001 || s.RunAsGroup == nil || *s.RunAsGroup != 10002 {
			t.Fatalf("pod securityContext %+v, want runAsUser 10001 runAsGroup 10002", s)
		}
		want := corev1.NodeSelectorRequirement{Key: vocab.RuntimeLabel("python-3.12"), Operator: corev1.NodeSelectorOpIn,
			Values: []string{vocab.LabelValueReady, vocab.LabelValueAvailable}}
		pool := corev1.NodeSelectorRequirement{Key: offersPoolKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"general"}}
		noCP := corev1.NodeSelectorRequirement{Key: nodepool.ControlPlaneLabel, Operator: corev1.NodeSelectorOpDoesNotExist}
		terms := got.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 2 {
			t.Fatalf("terms %+v", terms)
		}
		for i, term := range terms {
			n := len(term.MatchExpressions)
			if n < 3 || !equality.Semantic.DeepEqual(term.MatchExpressions[n-3:], []corev1.NodeSelectorRequirement{want, pool, noCP}) {
				t.Fatalf("term %d lacks the runtime and placement requirements: %+v", i, term)
			}
		}
		if w := warn.take(); len(w) != 0 {
			t.Fatalf("unexpected warnings %q", w)
		}

		// kubectl debug: an ephemeral container is judged too.
		got.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
		err := c.SubResource("ephemeralcontainers").Update(ctx, got)
		kit.ExpectDenied(t, err, string(vocab.ReasonPrivilegeNotSupported)+`: spec.ephemeralContainers[0] "debug": securityContext.privileged`)
		// The scheduler and kwok write the pod meanwhile: start from the latest version, and
		// again after a conflict.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				return err
			}
			got.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "busybox"}}}
			return c.SubResource("ephemeralcontainers").Update(ctx, got)
		}); err != nil {
			t.Fatalf("plain ephemeral container refused: %v", err)
		}
	})

	t.Run("scheduled only onto nodes offering the runtime", func(t *testing.T) {
		var pods []*corev1.Pod
		for i := 0; i < 12; i++ {
			pod := admissionPod(fmt.Sprintf("sched-%d", i), "python-3.12", func(p *corev1.Pod) {
				// Without a controller-manager nobody lifts the fake nodes' startup taints;
				// this test is about labels, so every taint is tolerated.
				p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
			})
			if err := wc.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, pod)
		}
		kit.Eventually(t, 60*time.Second, "every pod scheduled", func() (bool, string) {
			for _, p := range pods {
				got := &corev1.Pod{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
					return false, err.Error()
				}
				switch got.Spec.NodeName {
				case "":
					return false, fmt.Sprintf("%s pending: %+v", p.Name, got.Status.Conditions)
				case "py-ready", "py-on-demand":
				default:
					t.Fatalf("%s scheduled onto %s, which is in no pool offering python-3.12", p.Name, got.Spec.NodeName)
				}
			}
			return true, ""
		})
	})

	t.Run("PATH warning", func(t *testing.T) {
		pod := admissionPod("path", "python-3.12", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PATH", Value: "/opt/bin"}}
		})
		if err := wc.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		w := warn.take()
		if len(w) != 1 || !strings.Contains(w[0], `"app" sets env PATH`) {
			t.Fatalf("warnings %q", w)
		}
	})

	for _, tc := range []struct {
		name, id string
		mut      func(*corev1.Pod)
		want     string
	}{
		{"missing annotation", "", nil, "RuntimeImageRequired: "},
		{"invalid ID", "python:3.12", nil, "InvalidRuntimeImageID: "},
		{"unknown ID", "perl-5", nil, `UnknownRuntimeImage: annotation brewlet.sh/runtime-image names "perl-5"`},
		{"revoked ID", "ruby-3", nil, "RuntimeImageRevoked: RuntimeImage ruby-3 is revoked"},
		{"offered to no pool", "node-20", nil, "RuntimeNotOffered: no NodeProfile offers runtime node-20"},
		{"privileged", "python-3.12", func(p *corev1.Pod) { appSC(p).Privileged = ptr.To(true) }, `PrivilegeNotSupported: spec.containers[0] "app": securityContext.privileged is true`},
		{"hostNetwork", "python-3.12", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "PrivilegeNotSupported: spec.hostNetwork is true"},
		{"added capability", "python-3.12", func(p *corev1.Pod) {
			appSC(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}
		}, "PrivilegeNotSupported: spec.containers[0] \"app\": securityContext.capabilities.add is [NET_ADMIN]"},
		{"allowPrivilegeEscalation", "python-3.12", func(p *corev1.Pod) { appSC(p).AllowPrivilegeEscalation = ptr.To(true) }, "PrivilegeNotSupported: spec.containers[0] \"app\": securityContext.allowPrivilegeEscalation is true"},
		{"root user", "python-3.12", func(p *corev1.Pod) { appSC(p).RunAsUser = ptr.To[int64](0) }, "RootNotSupported: spec.containers[0] \"app\": securityContext.runAsUser is 0"},
		{"root group", "python-3.12", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroups: []int64{0}}
		}, "RootNotSupported: spec.securityContext.supplementalGroups contains 0"},
		{"init container as root", "python-3.12", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "registry.example/app:1",
				SecurityContext: &corev1.SecurityContext{RunAsGroup: ptr.To[int64](0)}}}
		}, "RootNotSupported: spec.initContainers[0] \"setup\": securityContext.runAsGroup is 0"},
		{"procMount Unmasked", "python-3.12", func(p *corev1.Pod) {
			// The API server itself requires hostUsers: false for an Unmasked procMount.
			p.Spec.HostUsers = ptr.To(false)
			appSC(p).ProcMount = ptr.To(corev1.UnmaskedProcMount)
		}, "PrivilegeNotSupported: spec.containers[0] \"app\": securityContext.procMount is Unmasked"},
	} {
		t.Run("denied: "+tc.name, func(t *testing.T) {
			var mut []func(*corev1.Pod)
			if tc.mut != nil {
				mut = append(mut, tc.mut)
			}
			err := wc.Create(ctx, admissionPod("denied", tc.id, mut...))
			if err == nil {
				t.Fatalf("admitted; want %q", tc.want)
			}
			// The API server's form: admission webhook "<name>" denied the request: <message>.
			want := fmt.Sprintf("admission webhook %q denied the request: %s", admission.WebhookName, tc.want)
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("refusal %q\nwant it to contain %q", err.Error(), want)
			}
		})
	}

	// A rotation restart's pods avoid the nodes the rotation left behind, one metadata.name
	// requirement each: the API server accepts the pod with two excluded nodes and with as
	// many as admission keeps, and the scheduler places it on the node left.
	t.Run("restarted pods avoid any number of excluded nodes", func(t *testing.T) {
		live := getRI(t, c, "python-3.12")
		for _, n := range []int{2, admission.MaxAvoidedNodes} {
			ri := live.DeepCopy()
			ri.Status.Rotation = &brewletv1.RotationStatus{ExcludedNodes: []brewletv1.ExcludedNode{{Name: "py-ready", Reason: string(vocab.ReasonNodeTimedOut)}}}
			for i := 1; i < n; i++ {
				ri.Status.Rotation.ExcludedNodes = append(ri.Status.Rotation.ExcludedNodes, brewletv1.ExcludedNode{Name: fmt.Sprintf("gone-%d", i), Reason: string(vocab.ReasonAgentNotReporting)})
			}
			pod := admissionPod(fmt.Sprintf("restarted-%d", n), "python-3.12", func(p *corev1.Pod) {
				p.Annotations[vocab.AnnotationRotatedToGeneration] = brewletv1.RotationBarrier{ID: live.Name, Epoch: live.UID, Generation: live.Status.Generation}.String()
				p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}} // the fake nodes' startup taints
			})
			d := admission.Admit(pod, ri, nodepool.Offering([]brewletv1.NodeProfile{*getProfile(t, c, "general")}, "python-3.12"))
			if !d.Allowed() {
				t.Fatal(d.Message())
			}
			if err := wc.Create(ctx, d.Pod); err != nil {
				t.Fatalf("a restarted pod avoiding %d excluded nodes: %v", n, err)
			}
			kit.Eventually(t, 30*time.Second, "the restarted pod on the node left", func() (bool, string) {
				got := &corev1.Pod{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(d.Pod), got); err != nil {
					return false, err.Error()
				}
				return got.Spec.NodeName == "py-on-demand", "on " + got.Spec.NodeName
			})
			_ = c.Delete(ctx, d.Pod)
		}
	})

	t.Run("another RuntimeClass is never sent to the webhook", func(t *testing.T) {
		other := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"}
		if err := c.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		before := admissionRequests(t, cp, metricsAddr)
		for i, rc := range []*string{nil, ptr.To("runc")} {
			pod := admissionPod(fmt.Sprintf("plain-%d", i), "", func(p *corev1.Pod) {
				p.Spec.RuntimeClassName = rc
				p.Spec.HostNetwork = true // would be refused if it were judged
			})
			if err := wc.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatal(err)
			}
			if got.Spec.Affinity != nil || (got.Spec.SecurityContext != nil && got.Spec.SecurityContext.RunAsUser != nil) {
				t.Fatalf("pod of runtimeClass %v was mutated: %+v", rc, got.Spec)
			}
		}
		if after := admissionRequests(t, cp, metricsAddr); after != before {
			t.Fatalf("the webhook judged %d requests for pods of other RuntimeClasses", after-before)
		}
		// A Brewlet pod moves the same counter: the check above can see requests.
		_ = wc.Create(ctx, admissionPod("counted", ""))
		if after := admissionRequests(t, cp, metricsAddr); after != before+1 {
			t.Fatalf("counter %d -> %d for one Brewlet pod", before, after)
		}
	})

	t.Run("certificates rotate without refusing a pod", func(t *testing.T) {
		testRotationUnderLoad(t, c, wc, port, legacyCA)
	})
}

// testRotationUnderLoad creates admitted pods continuously while the serving certificate
// (12s lifetime, a CA of its own each) rotates underneath, until it has seen three serving
// certificates and their CAs; every pod must be admitted, and at no point may the Secret
// hold a CA's private key.
func testRotationUnderLoad(t *testing.T, c, wc client.Client, port int, legacyCA *x509.Certificate) {
	ctx := context.Background()
	leaves, cas := map[[32]byte]bool{}, map[string]bool{}
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; len(cas) < 3 || len(leaves) < 3; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("saw %d CAs and %d serving certificates in 90s", len(cas), len(leaves))
		}
		if problem, err := admissionSecretProblem(ctx, c, legacyCA); err != nil || problem != "" {
			t.Fatalf("certificate Secret during rotation: %s %v", problem, err)
		}
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only reading the served certificate
		if err != nil {
			t.Fatal(err)
		}
		leaf := conn.ConnectionState().PeerCertificates[0]
		leaves[sha256.Sum256(leaf.Raw)] = true
		cas[string(leaf.AuthorityKeyId)] = true
		_ = conn.Close()
		if err := wc.Create(ctx, admissionPod(fmt.Sprintf("rot-%d", i), "python-3.12")); err != nil {
			t.Fatalf("pod %d refused during rotation: %v", i, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// installWebhook creates the pod webhook configuration for the operator serving on port,
// without a caBundle, and waits until the operator has filled it in from its Secret.
func installWebhook(t *testing.T, c client.Client, port int) {
	t.Helper()
	ctx := context.Background()
	cfg := admission.Configuration(admission.ClientConfig{URL: fmt.Sprintf("https://127.0.0.1:%d%s", port, admission.Path)})
	if err := c.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	kit.Eventually(t, 30*time.Second, "caBundle patched from the operator's Secret", func() (bool, string) {
		sec, cur := &corev1.Secret{}, &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: admission.SecretName}, sec); err != nil {
			return false, err.Error()
		}
		if err := c.Get(ctx, types.NamespacedName{Name: admission.ConfigurationName}, cur); err != nil {
			return false, err.Error()
		}
		return len(sec.Data[admission.KeyCABundle]) > 0 && bytes.Equal(cur.Webhooks[0].ClientConfig.CABundle, sec.Data[admission.KeyCABundle]), "not yet"
	})
}
