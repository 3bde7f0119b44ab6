package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func testScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := brewletv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func newRotator(c client.Client, dir string, now func() time.Time) *Rotator {
	return &Rotator{Reader: c, Writer: c, Namespace: "brewlet-system", SecretName: SecretName,
		ConfigurationName: ConfigurationName, CertDir: dir, Policy: testPolicy, Now: now}
}

func TestRotatorReplicas(t *testing.T) {
	ctx := context.Background()
	cfg := Configuration(ClientConfig{URL: "https://127.0.0.1:1/admit-pods"})
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cfg).Build()
	now := time.Now()
	clock := func() time.Time { return now }
	a, b := newRotator(c, t.TempDir(), clock), newRotator(c, t.TempDir(), clock)
	if err := a.Ready(); err == nil {
		t.Fatal("ready without a certificate")
	}
	// A creates the Secret; B, having read "not found" just before, loses the create...
	var missing corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: SecretName}, &missing); !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	// ...and adopts A's on its pass: one CA for both.
	if err := b.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Ready() != nil || b.Ready() != nil || !bytes.Equal(a.CABundle(), b.CABundle()) {
		t.Fatal("replicas serve different CAs")
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: SecretName}, sec); err != nil {
		t.Fatal(err)
	}
	stored := cfg.DeepCopy()
	if err := c.Get(ctx, types.NamespacedName{Name: ConfigurationName}, stored); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored.Webhooks[0].ClientConfig.CABundle, sec.Data[KeyCABundle]) {
		t.Fatal("caBundle not patched")
	}
	for _, name := range []string{KeyCert, KeyKey, KeyCABundle} {
		data, err := os.ReadFile(filepath.Join(a.CertDir, name))
		if err != nil || !bytes.Equal(data, sec.Data[name]) {
			t.Fatalf("cert dir %s: %v", name, err)
		}
	}
	// Nothing due: no writes.
	rv, cfgRV := sec.ResourceVersion, stored.ResourceVersion
	for _, r := range []*Rotator{a, b} {
		if err := r.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: SecretName}, sec)
	_ = c.Get(ctx, types.NamespacedName{Name: ConfigurationName}, stored)
	if sec.ResourceVersion != rv || stored.ResourceVersion != cfgRV {
		t.Fatal("an idle pass wrote")
	}
	// Rotation across replicas: A stages a successor (certificate and key, its CA's key
	// already gone), B promotes the very one A staged, and A serves it after its next pass.
	first, _ := a.GetCertificate(nil)
	now = now.Add(21 * time.Hour)
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: SecretName}, sec)
	if len(sec.Data[KeyNextCert]) == 0 || len(parseCerts(sec.Data[KeyCABundle])) != 2 {
		t.Fatal("successor not staged")
	}
	if cur, _ := a.GetCertificate(nil); !bytes.Equal(cur.Certificate[0], first.Certificate[0]) {
		t.Fatal("a staged certificate was served before promoteDelay")
	}
	_ = c.Get(ctx, types.NamespacedName{Name: ConfigurationName}, stored)
	if !bytes.Equal(stored.Webhooks[0].ClientConfig.CABundle, sec.Data[KeyCABundle]) {
		t.Fatal("the successor's CA was not published in the caBundle")
	}
	now = now.Add(11 * time.Minute)
	for _, r := range []*Rotator{b, a} {
		if err := r.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	promoted := &corev1.Secret{}
	_ = c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: SecretName}, promoted)
	if !bytes.Equal(promoted.Data[KeyCert], sec.Data[KeyNextCert]) || len(promoted.Data[KeyNextCert]) != 0 {
		t.Fatal("the other replica did not promote the staged successor")
	}
	ca, _ := a.GetCertificate(nil)
	cb, _ := b.GetCertificate(nil)
	if !bytes.Equal(ca.Certificate[0], cb.Certificate[0]) || bytes.Equal(ca.Certificate[0], first.Certificate[0]) {
		t.Fatal("replicas serve different certificates after a rotation")
	}
	assertNoCAKey(t, promoted.Data)
	// A restarted replica serves the last certificate from its cert dir before any pass.
	r := newRotator(c, a.CertDir, clock)
	r.loadFiles()
	if r.Ready() != nil {
		t.Fatal("cert dir not loaded")
	}
}

// TestRotatorMigratesLegacySecret: a Secret of a version that kept the CA key is moved to
// one-shot CAs without a certificate the API server does not trust, and the CA and its key
// leave together.
func TestRotatorMigratesLegacySecret(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	legacy := legacySecret(t, 300*time.Hour, 30*time.Hour, t0)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "brewlet-system", Name: SecretName}, Data: legacy}
	cfg := Configuration(ClientConfig{URL: "https://127.0.0.1:1/admit-pods"})
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cfg, sec).Build()
	now := t0
	r := newRotator(c, t.TempDir(), func() time.Time { return now })
	read := func() (*corev1.Secret, []byte) {
		t.Helper()
		s, m := &corev1.Secret{}, cfg.DeepCopy()
		if err := c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: SecretName}, s); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, types.NamespacedName{Name: ConfigurationName}, m); err != nil {
			t.Fatal(err)
		}
		return s, m.Webhooks[0].ClientConfig.CABundle
	}
	for _, step := range []struct {
		after               time.Duration
		servesLegacy, caKey bool
		cas                 int
	}{
		{0, true, true, 2},                 // successor staged at once: the old CA signed many
		{11 * time.Minute, false, true, 2}, // promoted; the old CA still trusted for lagging replicas
		{21 * time.Minute, false, false, 1},
	} {
		now = t0.Add(step.after)
		if err := r.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		s, bundle := read()
		served, _ := r.GetCertificate(nil)
		if got := bytes.Equal(pemBytes(t, legacy[KeyCert]), served.Certificate[0]); got != step.servesLegacy {
			t.Fatalf("+%s: serves the old certificate %v", step.after, got)
		}
		if _, ok := s.Data["ca.key"]; ok != step.caKey {
			t.Fatalf("+%s: ca.key present %v", step.after, ok)
		}
		if n := len(parseCerts(s.Data[KeyCABundle])); n != step.cas || !bytes.Equal(bundle, s.Data[KeyCABundle]) {
			t.Fatalf("+%s: %d CAs, caBundle patched %v", step.after, n, bytes.Equal(bundle, s.Data[KeyCABundle]))
		}
		assertNoCAKey(t, s.Data, "ca.key")
	}
}

func pemBytes(t *testing.T, data []byte) []byte {
	t.Helper()
	blk, _ := pem.Decode(data)
	if blk == nil {
		t.Fatal("no PEM")
	}
	return blk.Bytes
}

func TestRotatorConflict(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()
	now := time.Now()
	a := newRotator(c, "", func() time.Time { return now })
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	// A stale read loses against a newer write: the update carries its resourceVersion.
	stale := &corev1.Secret{}
	_ = c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: SecretName}, stale)
	fresh := stale.DeepCopy()
	fresh.Labels = map[string]string{"x": "y"}
	if err := c.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	stale.Data[KeyCert] = []byte("x")
	if err := a.Writer.Update(ctx, stale); !apierrors.IsConflict(err) {
		t.Fatalf("stale update: %v", err)
	}
}

func podRequest(t *testing.T, op admissionv1.Operation, pod *corev1.Pod) admission.Request {
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	req := admission.Request{}
	req.Operation, req.Object.Raw, req.UID = op, raw, "u1"
	return req
}

func TestHandler(t *testing.T) {
	ctx := context.Background()
	ri := approvedRI("python-3.12")
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(ri).Build()
	empty := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()
	// The cache misses a just-created RuntimeImage; the API server has it.
	h := &Handler{Cache: empty, Direct: c}
	// ... but no NodeProfile offers it yet: no node may run the pod.
	if resp := h.Handle(ctx, podRequest(t, admissionv1.Create, brewletPod())); resp.Allowed || !strings.Contains(resp.Result.Message, string(vocab.ReasonRuntimeNotOffered)) {
		t.Fatalf("create with no profile offering the runtime: allowed=%v %+v", resp.Allowed, resp.Result)
	}
	// A NodeProfile created a moment ago, missing from the cache too, offers it.
	if err := c.Create(ctx, offeringProfile("python-3.12")); err != nil {
		t.Fatal(err)
	}

	pod := brewletPod(func(p *corev1.Pod) { p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PATH", Value: "/x"}} })
	resp := h.Handle(ctx, podRequest(t, admissionv1.Create, pod))
	if !resp.Allowed || len(resp.Patches) == 0 || len(resp.Warnings) != 1 {
		t.Fatalf("create: allowed=%v patches=%d warnings=%q", resp.Allowed, len(resp.Patches), resp.Warnings)
	}
	// ephemeralcontainers update: judged, never patched.
	resp = h.Handle(ctx, podRequest(t, admissionv1.Update, pod))
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("update: allowed=%v patches=%v", resp.Allowed, resp.Patches)
	}
	bad := brewletPod(func(p *corev1.Pod) { p.Spec.HostPID = true })
	resp = h.Handle(ctx, podRequest(t, admissionv1.Create, bad))
	if resp.Allowed || !strings.HasPrefix(resp.Result.Message, string(vocab.ReasonPrivilegeNotSupported)+": ") {
		t.Fatalf("denial: %+v", resp.Result)
	}
	unknown := brewletPod(func(p *corev1.Pod) { p.Annotations[vocab.AnnotationRuntimeImage] = "ruby-3" })
	resp = h.Handle(ctx, podRequest(t, admissionv1.Create, unknown))
	if resp.Allowed || !strings.HasPrefix(resp.Result.Message, string(vocab.ReasonUnknownRuntimeImage)) {
		t.Fatalf("unknown: %+v", resp.Result)
	}
	invalid := brewletPod(func(p *corev1.Pod) { p.Annotations[vocab.AnnotationRuntimeImage] = "a/b" })
	resp = h.Handle(ctx, podRequest(t, admissionv1.Create, invalid))
	if resp.Allowed || !strings.HasPrefix(resp.Result.Message, string(vocab.ReasonInvalidRuntimeImageID)) {
		t.Fatalf("invalid: %+v", resp.Result)
	}
	other := brewletPod(func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To("runc"); p.Spec.HostPID = true })
	if resp := h.Handle(ctx, podRequest(t, admissionv1.Create, other)); !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatal("another RuntimeClass was judged")
	}
	req := podRequest(t, admissionv1.Create, pod)
	req.Object.Raw = []byte("{")
	if resp := h.Handle(ctx, req); resp.Allowed {
		t.Fatal("undecodable pod allowed")
	}
}
