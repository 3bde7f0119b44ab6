package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// ownedChecks are the Pod Security checks on fields Admit refuses or sets. The others
// (volumes, host ports, sysctls, SELinux, AppArmor, probe hosts) stay Pod Security's own
// judgement, so a fuzzed pod may fail them after admission.
var ownedChecks = map[policy.CheckID]bool{
	"allowPrivilegeEscalation": true, "capabilities_baseline": true, "capabilities_restricted": true,
	"hostNamespaces": true, "privileged": true, "procMount": true, "procMount_restricted": true,
	"runAsNonRoot": true, "runAsUser": true, "seccompProfile_baseline": true, "seccompProfile_restricted": true,
	"windowsHostProcess": true,
}

// evaluators of Kubernetes' own Pod Security checks (the library the API server's
// PodSecurity admission runs): every default check, and only the owned ones.
var evaluators = sync.OnceValues(func() (map[bool]policy.Evaluator, error) {
	out := map[bool]policy.Evaluator{}
	for _, owned := range []bool{false, true} {
		var checks []policy.Check
		for _, c := range policy.DefaultChecks() {
			if !owned || ownedChecks[c.ID] {
				checks = append(checks, c)
			}
		}
		if owned && len(checks) != len(ownedChecks) {
			return nil, fmt.Errorf("Pod Security has %d of the %d owned checks: an ID was renamed", len(checks), len(ownedChecks))
		}
		ev, err := policy.NewEvaluator(checks, nil)
		if err != nil {
			return nil, err
		}
		out[owned] = ev
	}
	return out, nil
})

// podSecurity returns the forbidden reasons of Pod Security at level:latest, only of the
// owned checks when owned is set.
func podSecurity(t testing.TB, pod *corev1.Pod, level api.Level, owned bool) []string {
	t.Helper()
	evs, err := evaluators()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range evs[owned].EvaluatePod(api.LevelVersion{Level: level, Version: api.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
		if !r.Allowed {
			out = append(out, r.ForbiddenReason+" ("+r.ForbiddenDetail+")")
		}
	}
	return out
}

func ephemeral(name string, s *corev1.SecurityContext) corev1.EphemeralContainer {
	return corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, SecurityContext: s}}
}

func confined(drop ...corev1.Capability) *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: drop}}
}

func TestAdmitPodSecurityFields(t *testing.T) {
	localhost := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/app.json")}
	runtimeDefault := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	for _, tc := range []struct {
		name        string
		pod         *corev1.Pod
		wantSeccomp *corev1.SeccompProfile
		// wantInit, wantApp: the containers' securityContexts after admission.
		wantInit, wantApp *corev1.SecurityContext
		wantEphemeral     []corev1.EphemeralContainer
	}{
		{name: "nothing set", pod: brewletPod(), wantSeccomp: runtimeDefault,
			wantInit: confined("ALL"), wantApp: confined("ALL")},
		{name: "pod Localhost profile kept", pod: brewletPod(func(p *corev1.Pod) { psc(p).SeccompProfile = localhost.DeepCopy() }),
			wantSeccomp: localhost, wantInit: confined("ALL"), wantApp: confined("ALL")},
		{name: "container profile and runAsNonRoot kept", pod: brewletPod(func(p *corev1.Pod) {
			sc(p).SeccompProfile, sc(p).RunAsNonRoot = localhost.DeepCopy(), ptr.To(true)
		}), wantSeccomp: runtimeDefault, wantInit: confined("ALL"), wantApp: func() *corev1.SecurityContext {
			s := confined("ALL")
			s.SeccompProfile, s.RunAsNonRoot = localhost, ptr.To(true)
			return s
		}()},
		{name: "existing drops kept, ALL appended", pod: brewletPod(func(p *corev1.Pod) {
			sc(p).Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW", "all"}}
		}), wantSeccomp: runtimeDefault, wantInit: confined("ALL"), wantApp: confined("NET_RAW", "all", "ALL")},
		{name: "drop ALL not repeated", pod: brewletPod(func(p *corev1.Pod) {
			sc(p).Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL", "NET_RAW"}}
		}), wantSeccomp: runtimeDefault, wantInit: confined("ALL"), wantApp: confined("ALL", "NET_RAW")},
		{name: "explicit allowPrivilegeEscalation false and other fields kept", pod: brewletPod(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
				ReadOnlyRootFilesystem: ptr.To(true), RunAsUser: ptr.To[int64](4242)}
		}), wantSeccomp: runtimeDefault, wantApp: confined("ALL"), wantInit: func() *corev1.SecurityContext {
			s := confined("ALL")
			s.ReadOnlyRootFilesystem, s.RunAsUser = ptr.To(true), ptr.To[int64](4242)
			return s
		}()},
		{name: "ephemeral containers too", pod: brewletPod(func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debug", nil),
				ephemeral("debug2", &corev1.SecurityContext{SeccompProfile: runtimeDefault.DeepCopy()})}
		}), wantSeccomp: runtimeDefault, wantInit: confined("ALL"), wantApp: confined("ALL"),
			wantEphemeral: []corev1.EphemeralContainer{ephemeral("debug", confined("ALL")), ephemeral("debug2", func() *corev1.SecurityContext {
				s := confined("ALL")
				s.SeccompProfile = runtimeDefault
				return s
			}())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unchanged := podSecurity(t, tc.pod, api.LevelRestricted, false)
			d := Admit(tc.pod, approvedRI("python-3.12"), testPools)
			if !d.Allowed() {
				t.Fatal(d.Message())
			}
			s := d.Pod.Spec
			if s.SecurityContext.RunAsNonRoot == nil || !*s.SecurityContext.RunAsNonRoot {
				t.Fatal("pod-level runAsNonRoot not true")
			}
			// The kubelet verifies runAsNonRoot against a numeric uid: one is always set.
			if s.SecurityContext.RunAsUser == nil || *s.SecurityContext.RunAsUser == 0 {
				t.Fatal("runAsNonRoot without a numeric non-root pod-level runAsUser")
			}
			if !reflect.DeepEqual(s.SecurityContext.SeccompProfile, tc.wantSeccomp) {
				t.Fatalf("pod seccompProfile %+v, want %+v", s.SecurityContext.SeccompProfile, tc.wantSeccomp)
			}
			if !reflect.DeepEqual(s.InitContainers[0].SecurityContext, tc.wantInit) {
				t.Fatalf("init securityContext\n got %+v\nwant %+v", s.InitContainers[0].SecurityContext, tc.wantInit)
			}
			if !reflect.DeepEqual(s.Containers[0].SecurityContext, tc.wantApp) {
				t.Fatalf("app securityContext\n got %+v\nwant %+v", s.Containers[0].SecurityContext, tc.wantApp)
			}
			if !reflect.DeepEqual(s.EphemeralContainers, tc.wantEphemeral) {
				t.Fatalf("ephemeral containers\n got %+v\nwant %+v", s.EphemeralContainers, tc.wantEphemeral)
			}
			// Kubernetes' own checks, all of them: the admitted pod passes restricted and
			// baseline; the pod as written did not pass restricted, so the check can fail.
			for _, level := range []api.Level{api.LevelRestricted, api.LevelBaseline} {
				if v := podSecurity(t, d.Pod, level, false); len(v) != 0 {
					t.Fatalf("admitted pod violates %s: %q", level, v)
				}
			}
			if len(unchanged) == 0 {
				t.Fatal("the pod as written already passes restricted: the case proves nothing")
			}
			if again := Admit(d.Pod, approvedRI("python-3.12"), testPools); !reflect.DeepEqual(again.Pod, d.Pod) {
				t.Fatal("second admission changed the pod")
			}
		})
	}
}

// Settings that ask for what the node never grants are refused with a typed reason, not
// rewritten: the user learns that the manifest says something Brewlet will not do.
func TestAdmitPodSecurityContradictions(t *testing.T) {
	unconfined := func() *corev1.SeccompProfile {
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		reason vocab.Reason
		want   string
	}{
		{"pod runAsNonRoot false", brewletPod(func(p *corev1.Pod) { psc(p).RunAsNonRoot = ptr.To(false) }),
			vocab.ReasonRootNotSupported, "spec.securityContext.runAsNonRoot is false; Brewlet runs applications only as non-root"},
		{"container runAsNonRoot false", brewletPod(func(p *corev1.Pod) { sc(p).RunAsNonRoot = ptr.To(false) }),
			vocab.ReasonRootNotSupported, `spec.containers[0] "app": securityContext.runAsNonRoot is false`},
		{"pod seccomp Unconfined", brewletPod(func(p *corev1.Pod) { psc(p).SeccompProfile = unconfined() }),
			vocab.ReasonPrivilegeNotSupported, `spec.securityContext.seccompProfile.type is "Unconfined"; Brewlet containers always run under a seccomp filter`},
		{"init container seccomp Unconfined", brewletPod(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: unconfined()}
		}), vocab.ReasonPrivilegeNotSupported, `spec.initContainers[0] "init": securityContext.seccompProfile.type is "Unconfined"`},
		{"container seccomp without a type", brewletPod(func(p *corev1.Pod) { sc(p).SeccompProfile = &corev1.SeccompProfile{} }),
			vocab.ReasonPrivilegeNotSupported, `spec.containers[0] "app": securityContext.seccompProfile.type is ""`},
		{"ephemeral container runAsNonRoot false", brewletPod(func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debug", &corev1.SecurityContext{RunAsNonRoot: ptr.To(false)})}
		}), vocab.ReasonRootNotSupported, `spec.ephemeralContainers[0] "debug": securityContext.runAsNonRoot is false`},
		// Restricted allows adding NET_BIND_SERVICE, but the node grants no capability, so
		// Brewlet refuses it as it refuses every add rather than drop it silently.
		{"add NET_BIND_SERVICE", brewletPod(func(p *corev1.Pod) {
			sc(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}
		}), vocab.ReasonPrivilegeNotSupported, "capabilities.add is [NET_BIND_SERVICE]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Admit(tc.pod, approvedRI("python-3.12"), testPools)
			if d.Allowed() {
				t.Fatalf("admitted; want %s", tc.reason)
			}
			if len(d.Denials) != 1 || d.Denials[0].Reason != tc.reason || !strings.Contains(d.Message(), tc.want) {
				t.Fatalf("message %q: want one %s with %q", d.Message(), tc.reason, tc.want)
			}
		})
	}
}

func TestNewEphemeralContainers(t *testing.T) {
	old := brewletPod(func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("before", nil)}
	})
	req := old.DeepCopy()
	req.Spec.EphemeralContainers = append(req.Spec.EphemeralContainers, ephemeral("debug", nil))
	d := Admit(req, approvedRI("python-3.12"), testPools)
	if !d.Allowed() {
		t.Fatal(d.Message())
	}
	got, err := newEphemeralContainers(req, d.Pod, old)
	if err != nil {
		t.Fatal(err)
	}
	want := req.DeepCopy()
	want.Spec.EphemeralContainers[1].SecurityContext = confined("ALL")
	// Only the added container changes: the API server refuses changes to an existing
	// ephemeral container and ignores the rest of the pod on this subresource.
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got.Spec, want.Spec)
	}
	if _, err := newEphemeralContainers(req, old, old); err == nil {
		t.Fatal("mismatched container counts accepted")
	}
}

// The handler on the ephemeralcontainers subresource: the patch writes only the added
// container's securityContext.
func TestHandlerPatchesNewEphemeralContainer(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := brewletv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h := &Handler{Cache: fake.NewClientBuilder().WithScheme(scheme).WithObjects(approvedRI("python-3.12"), offeringProfile("python-3.12")).Build()}
	old := brewletPod(func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("before", nil)}
	})
	pod := old.DeepCopy()
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, ephemeral("debug", nil))
	raw := func(p *corev1.Pod) []byte {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	req := admission.Request{}
	req.UID, req.Operation, req.SubResource = "u1", admissionv1.Update, "ephemeralcontainers"
	req.Object.Raw, req.OldObject.Raw = raw(pod), raw(old)
	resp := h.Handle(context.Background(), req)
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("allowed=%v patches=%v: %+v", resp.Allowed, resp.Patches, resp.Result)
	}
	for _, op := range resp.Patches {
		if !strings.HasPrefix(op.Path, "/spec/ephemeralContainers/1") {
			t.Fatalf("patch %s %s touches more than the added container", op.Operation, op.Path)
		}
	}
}
