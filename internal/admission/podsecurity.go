package admission

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"brewlet.sh/brewlet/internal/vocab"
)

// Pod Security admission (restricted, and baseline) judges a pod by fields the shim makes
// true on the node anyway: non-root, noNewPrivileges, no capabilities, a seccomp filter.
// Mutating webhooks run before validating admission, so writing those fields on the pod
// here lets a Brewlet pod without any securityContext pass Pod Security. Only gaps are
// filled: a value the user wrote is kept, and one that asks for what the node will not
// grant is refused, like allowPrivilegeEscalation: true already is, rather than rewritten.
//
// Pod admission writes on the pod, not on the workload's template, so GitOps tools see no
// drift: the Deployment stays as written, its pods carry the fields.

// capabilityAll is the drop entry Pod Security restricted requires, spelled as it compares.
const capabilityAll corev1.Capability = "ALL"

// podSecurityViolations returns the refusals for explicit settings that contradict what
// the node enforces: runAsNonRoot: false (the pod may run as root, which Brewlet never
// does) and a seccomp profile other than RuntimeDefault or Localhost (Unconfined: the node
// always filters; any other type is not one Kubernetes knows). The privilege asks of
// containers (allowPrivilegeEscalation, capabilities.add) are refused by securityViolations.
func podSecurityViolations(pod *corev1.Pod) []*vocab.Error {
	var out []*vocab.Error
	const (
		nonRootHint  = "Brewlet runs applications only as non-root; remove it (admission sets runAsNonRoot: true) or set true"
		seccompHint  = "Brewlet containers always run under a seccomp filter; remove it (admission sets RuntimeDefault) or name RuntimeDefault or a Localhost profile"
		podSCPrefix  = "spec.securityContext."
		unconfinedFm = "%sseccompProfile.type is %q; %s"
	)
	if psc := pod.Spec.SecurityContext; psc != nil {
		if isFalse(psc.RunAsNonRoot) {
			out = append(out, deny(vocab.ReasonRootNotSupported, "%srunAsNonRoot is false; %s", podSCPrefix, nonRootHint))
		}
		if unconfined(psc.SeccompProfile) {
			out = append(out, deny(vocab.ReasonPrivilegeNotSupported, unconfinedFm, podSCPrefix, psc.SeccompProfile.Type, seccompHint))
		}
	}
	for _, c := range containers(pod) {
		if c.sc == nil {
			continue
		}
		f := c.path + ": securityContext."
		if isFalse(c.sc.RunAsNonRoot) {
			out = append(out, deny(vocab.ReasonRootNotSupported, "%srunAsNonRoot is false; %s", f, nonRootHint))
		}
		if unconfined(c.sc.SeccompProfile) {
			out = append(out, deny(vocab.ReasonPrivilegeNotSupported, unconfinedFm, f, c.sc.SeccompProfile.Type, seccompHint))
		}
	}
	return out
}

func isFalse(p *bool) bool { return p != nil && !*p }

// unconfined: a profile is set and is neither of the two confining types.
func unconfined(p *corev1.SeccompProfile) bool {
	return p != nil && p.Type != corev1.SeccompProfileTypeRuntimeDefault && p.Type != corev1.SeccompProfileTypeLocalhost
}

// applyPodSecurity fills, where the pod leaves them unset, the fields Pod Security checks
// and the shim enforces regardless. Called on an admitted pod (podSecurityViolations and
// securityViolations found nothing), so nothing here can contradict a user's value.
//
//   - pod-level runAsNonRoot: true. Pod level so containers added later (ephemeral) inherit
//     it; a container's own true is kept. The kubelet verifies it against the uid it will
//     run, and defaultIdentity has set a numeric non-root pod-level runAsUser, so the check
//     passes without reading the image's user.
//   - pod-level seccompProfile RuntimeDefault. A container's own RuntimeDefault or
//     Localhost profile takes precedence as before; the shim narrows the filter further.
//   - per init, regular and ephemeral container: allowPrivilegeEscalation: false (the shim
//     sets noNewPrivileges) and "ALL" appended to capabilities.drop (the shim empties every
//     capability set); drops the user listed are kept.
func applyPodSecurity(pod *corev1.Pod) {
	if pod.Spec.SecurityContext == nil {
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	psc := pod.Spec.SecurityContext
	if psc.RunAsNonRoot == nil {
		psc.RunAsNonRoot = ptr.To(true)
	}
	if psc.SeccompProfile == nil {
		psc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	for i := range pod.Spec.InitContainers {
		confineContainer(&pod.Spec.InitContainers[i].SecurityContext)
	}
	for i := range pod.Spec.Containers {
		confineContainer(&pod.Spec.Containers[i].SecurityContext)
	}
	for i := range pod.Spec.EphemeralContainers {
		confineContainer(&pod.Spec.EphemeralContainers[i].SecurityContext)
	}
}

// confineContainer is applyPodSecurity's per-container part. These two fields have no pod
// level, so every container gets them.
func confineContainer(scp **corev1.SecurityContext) {
	if *scp == nil {
		*scp = &corev1.SecurityContext{}
	}
	sc := *scp
	if sc.AllowPrivilegeEscalation == nil {
		sc.AllowPrivilegeEscalation = ptr.To(false)
	}
	if sc.Capabilities == nil {
		sc.Capabilities = &corev1.Capabilities{}
	}
	if !slices.Contains(sc.Capabilities.Drop, capabilityAll) {
		sc.Capabilities.Drop = append(slices.Clone(sc.Capabilities.Drop), capabilityAll)
	}
}

// newEphemeralContainers returns the pod to answer an UPDATE of the ephemeralcontainers
// subresource with: the request's pod where only the ephemeral containers that are new
// (absent from old) take their admitted form. The API server refuses any change to an
// ephemeral container that already exists, and drops every change outside ephemeral
// containers on this subresource, so the patch touches nothing else. Admit keeps the
// order and number of containers, so admitted's i-th is the request's i-th.
func newEphemeralContainers(req, admitted, old *corev1.Pod) (*corev1.Pod, error) {
	if len(req.Spec.EphemeralContainers) != len(admitted.Spec.EphemeralContainers) {
		return nil, fmt.Errorf("admitted pod has %d ephemeral containers, the request %d",
			len(admitted.Spec.EphemeralContainers), len(req.Spec.EphemeralContainers))
	}
	existing := map[string]bool{}
	if old != nil {
		for _, c := range old.Spec.EphemeralContainers {
			existing[c.Name] = true
		}
	}
	out := req.DeepCopy()
	for i, c := range req.Spec.EphemeralContainers {
		if !existing[c.Name] {
			out.Spec.EphemeralContainers[i] = *admitted.Spec.EphemeralContainers[i].DeepCopy()
		}
	}
	return out, nil
}
