package admission

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func approvedRI(name string) *brewletv1.RuntimeImage {
	return &brewletv1.RuntimeImage{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-1"},
		Spec:       brewletv1.RuntimeImageSpec{User: brewletv1.RuntimeUser{UID: 10001, GID: 10002}},
		Status: brewletv1.RuntimeImageStatus{Epoch: "uid-1", Conditions: []metav1.Condition{{
			Type: string(vocab.ConditionApproved), Status: metav1.ConditionTrue, Reason: string(vocab.ReasonApproved)}}},
	}
}

func brewletPod(mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
			Annotations: map[string]string{vocab.AnnotationRuntimeImage: "python-3.12"}},
		Spec: corev1.PodSpec{
			RuntimeClassName: ptr.To(vocab.RuntimeClassName),
			InitContainers:   []corev1.Container{{Name: "init"}},
			Containers:       []corev1.Container{{Name: "app"}},
		},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

func sc(p *corev1.Pod) *corev1.SecurityContext {
	if p.Spec.Containers[0].SecurityContext == nil {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{}
	}
	return p.Spec.Containers[0].SecurityContext
}

func psc(p *corev1.Pod) *corev1.PodSecurityContext {
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	return p.Spec.SecurityContext
}

func TestAdmitDenials(t *testing.T) {
	revoked := approvedRI("python-3.12")
	revoked.Spec.Revoked = true
	deleting := approvedRI("python-3.12")
	deleting.DeletionTimestamp = &metav1.Time{}
	unapproved := approvedRI("python-3.12")
	unapproved.Status.Conditions[0].Status, unapproved.Status.Conditions[0].Reason = metav1.ConditionFalse, "Revoked"
	undescribed := approvedRI("python-3.12")
	undescribed.Status = brewletv1.RuntimeImageStatus{}
	otherEpoch := approvedRI("python-3.12")
	otherEpoch.Status.Epoch = "old-uid"
	rootUser := approvedRI("python-3.12")
	rootUser.Spec.User.UID = 0

	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		ri     *brewletv1.RuntimeImage
		reason vocab.Reason
		want   string // in the message
	}{
		{"no annotation", brewletPod(func(p *corev1.Pod) { p.Annotations = nil }), nil, vocab.ReasonRuntimeImageRequired, vocab.AnnotationRuntimeImage},
		{"empty annotation", brewletPod(func(p *corev1.Pod) { p.Annotations[vocab.AnnotationRuntimeImage] = "" }), nil, vocab.ReasonInvalidRuntimeImageID, "empty"},
		{"image reference", brewletPod(func(p *corev1.Pod) { p.Annotations[vocab.AnnotationRuntimeImage] = "python:3.12" }), nil, vocab.ReasonInvalidRuntimeImageID, "not an image reference"},
		{"unknown", brewletPod(), nil, vocab.ReasonUnknownRuntimeImage, `"python-3.12"`},
		{"other RuntimeImage", brewletPod(), approvedRI("ruby-3"), vocab.ReasonUnknownRuntimeImage, "kubectl get runtimeimages"},
		{"revoked", brewletPod(), revoked, vocab.ReasonRuntimeImageRevoked, "spec.revoked"},
		{"deleting", brewletPod(), deleting, vocab.ReasonRuntimeImageRevoked, "being deleted"},
		{"Approved False", brewletPod(), unapproved, vocab.ReasonRuntimeImageRevoked, "not approved (Revoked"},
		{"no status yet", brewletPod(), undescribed, vocab.ReasonRuntimeImageRevoked, "not approved yet"},
		{"status of another epoch", brewletPod(), otherEpoch, vocab.ReasonRuntimeImageRevoked, "not approved yet"},
		{"root spec.user", brewletPod(), rootUser, vocab.ReasonRootNotSupported, "spec.user 0:10002"},
		{"hostNetwork", brewletPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), approvedRI("python-3.12"), vocab.ReasonPrivilegeNotSupported, "spec.hostNetwork"},
		{"hostPID", brewletPod(func(p *corev1.Pod) { p.Spec.HostPID = true }), approvedRI("python-3.12"), vocab.ReasonPrivilegeNotSupported, "spec.hostPID"},
		{"hostIPC", brewletPod(func(p *corev1.Pod) { p.Spec.HostIPC = true }), approvedRI("python-3.12"), vocab.ReasonPrivilegeNotSupported, "spec.hostIPC"},
		{"pod runAsUser 0", brewletPod(func(p *corev1.Pod) { psc(p).RunAsUser = ptr.To[int64](0) }), approvedRI("python-3.12"), vocab.ReasonRootNotSupported, "spec.securityContext.runAsUser is 0"},
		{"pod runAsGroup 0", brewletPod(func(p *corev1.Pod) { psc(p).RunAsGroup = ptr.To[int64](0) }), approvedRI("python-3.12"), vocab.ReasonRootNotSupported, "spec.securityContext.runAsGroup is 0"},
		{"fsGroup 0", brewletPod(func(p *corev1.Pod) { psc(p).FSGroup = ptr.To[int64](0) }), approvedRI("python-3.12"), vocab.ReasonRootNotSupported, "fsGroup is 0"},
		{"supplementalGroups 0", brewletPod(func(p *corev1.Pod) { psc(p).SupplementalGroups = []int64{5, 0} }), approvedRI("python-3.12"), vocab.ReasonRootNotSupported, "supplementalGroups contains 0"},
		{"container runAsUser 0", brewletPod(func(p *corev1.Pod) { sc(p).RunAsUser = ptr.To[int64](0) }), approvedRI("python-3.12"), vocab.ReasonRootNotSupported, `spec.containers[0] "app": securityContext.runAsUser is 0`},
		{"container runAsGroup 0", brewletPod(func(p *corev1.Pod) { sc(p).RunAsGroup = ptr.To[int64](0) }), approvedRI("python-3.12"), vocab.ReasonRootNotSupported, "runAsGroup is 0"},
		{"privileged", brewletPod(func(p *corev1.Pod) { sc(p).Privileged = ptr.To(true) }), approvedRI("python-3.12"), vocab.ReasonPrivilegeNotSupported, "privileged is true"},
		{"allowPrivilegeEscalation", brewletPod(func(p *corev1.Pod) { sc(p).AllowPrivilegeEscalation = ptr.To(true) }), approvedRI("python-3.12"), vocab.ReasonPrivilegeNotSupported, "allowPrivilegeEscalation is true"},
		{"capabilities.add", brewletPod(func(p *corev1.Pod) {
			sc(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}
		}), approvedRI("python-3.12"), vocab.ReasonPrivilegeNotSupported, "capabilities.add is [NET_ADMIN]"},
		{"procMount Unmasked", brewletPod(func(p *corev1.Pod) { sc(p).ProcMount = ptr.To(corev1.UnmaskedProcMount) }), approvedRI("python-3.12"), vocab.ReasonPrivilegeNotSupported, "procMount is Unmasked"},
		{"hostProcess", brewletPod(func(p *corev1.Pod) {
			sc(p).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
		}), approvedRI("python-3.12"), vocab.ReasonPrivilegeNotSupported, "hostProcess"},
		{"init container privileged", brewletPod(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}), approvedRI("python-3.12"), vocab.ReasonPrivilegeNotSupported, `spec.initContainers[0] "init": securityContext.privileged`},
		{"ephemeral container root", brewletPod(func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}}}}
		}), approvedRI("python-3.12"), vocab.ReasonRootNotSupported, `spec.ephemeralContainers[0] "debug": securityContext.runAsUser is 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.pod.DeepCopy()
			d := Admit(tc.pod, tc.ri, testPools)
			if d.Allowed() || d.Pod != nil {
				t.Fatalf("admitted; want %s", tc.reason)
			}
			if d.Denials[0].Reason != tc.reason {
				t.Fatalf("first reason %s, want %s (%s)", d.Denials[0].Reason, tc.reason, d.Message())
			}
			msg := d.Message()
			if !strings.HasPrefix(msg, string(tc.reason)+": ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("message %q: want prefix %s and %q", msg, tc.reason, tc.want)
			}
			if !reflect.DeepEqual(before, tc.pod) {
				t.Fatal("Admit modified its input")
			}
		})
	}
}

// Every violation is reported at once, each with its own reason.
func TestAdmitReportsAll(t *testing.T) {
	pod := brewletPod(func(p *corev1.Pod) {
		p.Spec.HostNetwork = true
		sc(p).RunAsUser = ptr.To[int64](0)
		delete(p.Annotations, vocab.AnnotationRuntimeImage)
	})
	d := Admit(pod, nil, testPools)
	var got []vocab.Reason
	for _, e := range d.Denials {
		got = append(got, e.Reason)
	}
	want := []vocab.Reason{vocab.ReasonRuntimeImageRequired, vocab.ReasonPrivilegeNotSupported, vocab.ReasonRootNotSupported}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("reasons %v, want %v: %s", got, want, d.Message())
	}
}

func TestAdmitDefaultsIdentity(t *testing.T) {
	for _, tc := range []struct {
		name             string
		pod              *corev1.Pod
		wantUID, wantGID int64
	}{
		{"nothing set", brewletPod(), 10001, 10002},
		{"explicit non-root pod user kept, group defaulted", brewletPod(func(p *corev1.Pod) { psc(p).RunAsUser = ptr.To[int64](2000) }), 2000, 10002},
		{"explicit pod group kept", brewletPod(func(p *corev1.Pod) { psc(p).RunAsGroup = ptr.To[int64](3000) }), 10001, 3000},
		{"both explicit", brewletPod(func(p *corev1.Pod) {
			psc(p).RunAsUser, psc(p).RunAsGroup = ptr.To[int64](5), ptr.To[int64](6)
		}), 5, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Admit(tc.pod, approvedRI("python-3.12"), testPools)
			if !d.Allowed() {
				t.Fatal(d.Message())
			}
			s := d.Pod.Spec.SecurityContext
			if *s.RunAsUser != tc.wantUID || *s.RunAsGroup != tc.wantGID {
				t.Fatalf("pod identity %d:%d, want %d:%d", *s.RunAsUser, *s.RunAsGroup, tc.wantUID, tc.wantGID)
			}
		})
	}
	// A container's explicit non-root user is not overridden: it keeps precedence over
	// the pod-level default.
	pod := brewletPod(func(p *corev1.Pod) { sc(p).RunAsUser = ptr.To[int64](4242) })
	d := Admit(pod, approvedRI("python-3.12"), testPools)
	if got := *d.Pod.Spec.Containers[0].SecurityContext.RunAsUser; got != 4242 {
		t.Fatalf("container runAsUser %d, want 4242 kept", got)
	}
}

// offeringProfile is a NodeProfile offering id to pool general (testPools).
func offeringProfile(id string) *brewletv1.NodeProfile {
	return &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: brewletv1.NodeProfileSpec{
		NodePool:      brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: []string{"general"}},
		RuntimeImages: []brewletv1.OfferedRuntime{{ID: id}}}}
}

// testPools: the runtime is offered to pool general (one placement, poolReq).
var testPools = [][]corev1.NodeSelectorRequirement{{poolReq()}}

func poolReq() corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: "node-restriction.kubernetes.io/pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"general"}}
}

func runtimeReq() corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: "node-restriction.kubernetes.io/brewlet.python-3.12", Operator: corev1.NodeSelectorOpIn,
		Values: []string{"ready", "available"}}
}

func TestAdmitNodeAffinity(t *testing.T) {
	zone := corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	arch := corev1.NodeSelectorRequirement{Key: "arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}
	host := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}
	withTerms := func(terms ...corev1.NodeSelectorTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
					Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}}},
			}}
		}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want []corev1.NodeSelectorTerm
	}{
		{"no affinity", brewletPod(), []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}}}},
		{"pod anti-affinity only", brewletPod(func(p *corev1.Pod) { p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}} }),
			[]corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}}}},
		{"empty term list", brewletPod(withTerms()), []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}}}},
		{"every term gets it", brewletPod(withTerms(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}},
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{arch}},
			corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{host}},
		)), []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{zone, runtimeReq(), poolReq()}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{arch, runtimeReq(), poolReq()}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{runtimeReq(), poolReq()}, MatchFields: []corev1.NodeSelectorRequirement{host}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Admit(tc.pod, approvedRI("python-3.12"), testPools)
			if !d.Allowed() {
				t.Fatal(d.Message())
			}
			got := d.Pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("terms\n got %+v\nwant %+v", got, tc.want)
			}
			if tc.pod.Spec.Affinity != nil && tc.pod.Spec.Affinity.PodAntiAffinity != nil && d.Pod.Spec.Affinity.PodAntiAffinity == nil {
				t.Fatal("pod anti-affinity lost")
			}
			// Idempotent: admitting the admitted pod changes nothing.
			again := Admit(d.Pod, approvedRI("python-3.12"), testPools)
			if !reflect.DeepEqual(again.Pod, d.Pod) {
				t.Fatal("second admission changed the pod")
			}
		})
	}
}

func TestAdmitWarnsOnPath(t *testing.T) {
	pod := brewletPod(func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "PATH", Value: "/x"}}
	})
	d := Admit(pod, approvedRI("python-3.12"), testPools)
	if !d.Allowed() || len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], `spec.containers[0] "app" sets env PATH`) {
		t.Fatalf("allowed=%v warnings=%q", d.Allowed(), d.Warnings)
	}
	if d := Admit(brewletPod(), approvedRI("python-3.12"), testPools); len(d.Warnings) != 0 {
		t.Fatalf("warnings without PATH: %q", d.Warnings)
	}
}

// Explicit non-privileged settings are not denials.
func TestAdmitAllowsHarmlessSettings(t *testing.T) {
	pod := brewletPod(func(p *corev1.Pod) {
		s := sc(p)
		s.Privileged, s.AllowPrivilegeEscalation = ptr.To(false), ptr.To(false)
		s.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
		s.ProcMount = ptr.To(corev1.DefaultProcMount)
		s.RunAsNonRoot = ptr.To(true)
		psc(p).FSGroup = ptr.To[int64](2000)
		psc(p).SupplementalGroups = []int64{2001}
	})
	if d := Admit(pod, approvedRI("python-3.12"), testPools); !d.Allowed() {
		t.Fatal(d.Message())
	}
}
