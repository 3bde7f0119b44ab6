package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// Serving renewal by one replica reaches the other on its next pass.
	now = now.Add(21 * time.Hour)
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	ca, _ := a.GetCertificate(nil)
	cb, _ := b.GetCertificate(nil)
	if !bytes.Equal(ca.Certificate[0], cb.Certificate[0]) {
		t.Fatal("replicas serve different certificates after a renewal")
	}
	// CA rotation: the published successor's key is stored, so the other replica (or a
	// restarted one) promotes the same CA rather than inventing its own.
	now = now.Add(201 * time.Hour)
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: SecretName}, sec)
	if len(sec.Data[KeyNextCAKey]) == 0 || len(parseCerts(sec.Data[KeyCABundle])) != 2 {
		t.Fatal("successor CA not stored")
	}
	now = now.Add(11 * time.Minute)
	if err := b.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := &corev1.Secret{}
	_ = c.Get(ctx, types.NamespacedName{Namespace: "brewlet-system", Name: SecretName}, promoted)
	if !bytes.Equal(promoted.Data[KeyCAKey], sec.Data[KeyNextCAKey]) || len(promoted.Data[KeyNextCAKey]) != 0 {
		t.Fatal("the other replica did not promote the stored successor")
	}
	// A restarted replica serves the last certificate from its cert dir before any pass.
	r := newRotator(c, a.CertDir, clock)
	r.loadFiles()
	if r.Ready() != nil {
		t.Fatal("cert dir not loaded")
	}
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
