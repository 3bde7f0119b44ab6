// Package admission is Brewlet's pod admission for runtimeClassName "brewlet": a pure
// decision (Admit) and the webhook that serves it from the operator, with a serving
// certificate the operator creates and rotates itself. Admission is the first, friendly
// line; the shim (docs/shim.md) refuses the same things again at container create, for pods
// that reach a node without passing here (static pods, a webhook bypassed or removed).
package admission

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// Decision is the outcome of Admit.
type Decision struct {
	// Pod is the pod to admit: the input with Brewlet's defaults and scheduling applied.
	// Nil when the pod is denied.
	Pod *corev1.Pod
	// Denials: every reason the pod is refused, in a stable order, so a user fixes all of
	// them in one round instead of one per attempt.
	Denials []*vocab.Error
	// Warnings are returned to the client (kubectl prints them) without refusing the pod.
	Warnings []string
}

// Allowed reports whether the pod is admitted.
func (d Decision) Allowed() bool { return len(d.Denials) == 0 }

// Message renders the denials as "<Reason>: <what and what to change>; <Reason>: ...", the
// text the API server returns to the client. Starting with the reason lets scripts and
// tests match the cause without parsing prose.
func (d Decision) Message() string {
	parts := make([]string, len(d.Denials))
	for i, e := range d.Denials {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// RuntimeImageID returns the runtime ID a pod names (the annotation's value, unchecked).
func RuntimeImageID(pod *corev1.Pod) (string, bool) {
	id, ok := pod.Annotations[vocab.AnnotationRuntimeImage]
	return id, ok
}

// IsBrewletPod reports whether the pod asks for Brewlet's RuntimeClass; only those are
// judged.
func IsBrewletPod(pod *corev1.Pod) bool {
	return pod.Spec.RuntimeClassName != nil && *pod.Spec.RuntimeClassName == vocab.RuntimeClassName
}

// Approval says whether a RuntimeImage may be used by new pods, and if not, why. It reads
// the spec and deletion mark as well as the condition: a kill switch set a moment ago is
// honoured before the operator has written Approved=False.
func Approval(ri *brewletv1.RuntimeImage) error {
	switch c := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionApproved)); {
	case ri.DeletionTimestamp != nil:
		return vocab.Errorf(vocab.ReasonRuntimeImageRevoked, "RuntimeImage %s is being deleted; name another runtime image", ri.Name)
	case ri.Spec.Revoked:
		return vocab.Errorf(vocab.ReasonRuntimeImageRevoked, "RuntimeImage %s is revoked (spec.revoked: true); name another runtime image or ask the platform team to re-approve it", ri.Name)
	case c == nil || ri.Status.Epoch != ri.UID:
		return vocab.Errorf(vocab.ReasonRuntimeImageRevoked, "RuntimeImage %s is not approved yet (the operator has not described it); retry in a few seconds", ri.Name)
	case c.Status != metav1.ConditionTrue:
		return vocab.Errorf(vocab.ReasonRuntimeImageRevoked, "RuntimeImage %s is not approved (%s: %s); name another runtime image", ri.Name, c.Reason, c.Message)
	}
	return nil
}

// Admit judges a pod that asks for runtimeClassName "brewlet". ri is the RuntimeImage the
// pod's annotation names, nil when there is none. Admit never modifies its arguments; the
// decision is idempotent (admitting an admitted pod changes nothing), so a re-invocation
// by the API server or a later validation-only pass sees no difference.
//
// Checks, all collected: the annotation (RuntimeImageRequired, InvalidRuntimeImageID,
// UnknownRuntimeImage, RuntimeImageRevoked), root identities (RootNotSupported) and
// privileges (PrivilegeNotSupported) of the pod and of every init, regular and ephemeral
// container. Mutations on an admitted pod: required node affinity on
// vocab.RuntimeLabel(id) in [ready, available] ANDed into every nodeSelectorTerm (and, for
// a pod a rotation restart created, the nodes that rotation excluded: avoidExcludedNodes),
// the pools that offer the runtime (requireOfferingPool), and pod-level runAsUser/runAsGroup
// defaulted from spec.user where the pod leaves them unset. Pod Security: contradictions of
// what the node enforces are refused (podSecurityViolations) and the fields restricted
// checks are filled where unset (applyPodSecurity).
//
// placements are where the NodeProfiles offering the runtime place it, in pool labels
// (nodepool.Offering); none refuses the pod (RuntimeNotOffered). Pool labels are the one
// thing about a node its own identities cannot write (their keys are under
// node-restriction.kubernetes.io/), so a node attracts a runtime's pods only while the
// profile that owns it offers that runtime, whatever labels its kubelet or agent set.
func Admit(pod *corev1.Pod, ri *brewletv1.RuntimeImage, placements [][]corev1.NodeSelectorRequirement) Decision {
	var d Decision
	id, ok := RuntimeImageID(pod)
	switch {
	case !ok:
		d.Denials = append(d.Denials, deny(vocab.ReasonRuntimeImageRequired,
			"a pod with runtimeClassName %q must name its runtime with annotation %s (for example %s: python-3.12)",
			vocab.RuntimeClassName, vocab.AnnotationRuntimeImage, vocab.AnnotationRuntimeImage))
	case vocab.ValidateRuntimeID(id) != nil:
		d.Denials = append(d.Denials, vocabErr(vocab.ValidateRuntimeID(id), "annotation "+vocab.AnnotationRuntimeImage))
	case ri == nil || ri.Name != id:
		d.Denials = append(d.Denials, deny(vocab.ReasonUnknownRuntimeImage,
			"annotation %s names %q but no RuntimeImage of that name exists; list the approved ones with 'kubectl get runtimeimages'",
			vocab.AnnotationRuntimeImage, id))
	default:
		if err := Approval(ri); err != nil {
			d.Denials = append(d.Denials, vocabErr(err, ""))
		}
		if len(placements) == 0 {
			d.Denials = append(d.Denials, deny(vocab.ReasonRuntimeNotOffered,
				"no NodeProfile offers runtime %s to a node pool (a pool key under %s), so no node may run this pod; ask the platform team to add %s to a NodeProfile's runtimeImages",
				id, vocab.NodeRestrictionPrefix, id))
		} else if n := offeredTerms(pod, placements); n > MaxNodeSelectorTerms {
			d.Denials = append(d.Denials, deny(vocab.ReasonLimitExceeded,
				"the pod's required node affinity would grow to %d terms (its terms times the %d NodeProfiles offering %s), more than %d; use fewer nodeSelectorTerms",
				n, len(placements), id, MaxNodeSelectorTerms))
		}
		// The CRD refuses a root spec.user; this guards the default against an object
		// that bypassed validation, because the default is what the pod would run as.
		if ri.Spec.User.UID < 1 || ri.Spec.User.GID < 1 {
			d.Denials = append(d.Denials, deny(vocab.ReasonRootNotSupported,
				"RuntimeImage %s has spec.user %d:%d; its user must be non-root, ask the platform team to fix it", ri.Name, ri.Spec.User.UID, ri.Spec.User.GID))
		}
	}
	d.Denials = append(d.Denials, securityViolations(pod)...)
	d.Denials = append(d.Denials, podSecurityViolations(pod)...)
	d.Warnings = pathWarnings(pod)
	if !d.Allowed() {
		return d
	}
	out := pod.DeepCopy()
	requireRuntimeLabel(out, id)
	requireOfferingPool(out, placements)
	avoidExcludedNodes(out, ri)
	defaultIdentity(out, ri.Spec.User)
	applyPodSecurity(out)
	d.Pod = out
	return d
}

func deny(r vocab.Reason, format string, a ...any) *vocab.Error {
	return &vocab.Error{Reason: r, Message: fmt.Sprintf(format, a...)}
}

// vocabErr keeps a *vocab.Error as is and prefixes its message with where it was found.
func vocabErr(err error, where string) *vocab.Error {
	e, ok := err.(*vocab.Error) //nolint:errorlint // our own constructors return *vocab.Error unwrapped
	if !ok {
		return &vocab.Error{Reason: vocab.ReasonOf(err), Message: err.Error()}
	}
	if where == "" {
		return e
	}
	return &vocab.Error{Reason: e.Reason, Message: where + ": " + e.Message, Err: e.Err}
}

// container is one container of any kind, with the field path users see in errors.
type container struct {
	path string // e.g. `spec.initContainers[0] "setup"`
	sc   *corev1.SecurityContext
	env  []corev1.EnvVar
}

func containers(pod *corev1.Pod) []container {
	var cs []container
	for i, c := range pod.Spec.InitContainers {
		cs = append(cs, container{fmt.Sprintf("spec.initContainers[%d] %q", i, c.Name), c.SecurityContext, c.Env})
	}
	for i, c := range pod.Spec.Containers {
		cs = append(cs, container{fmt.Sprintf("spec.containers[%d] %q", i, c.Name), c.SecurityContext, c.Env})
	}
	for i, c := range pod.Spec.EphemeralContainers {
		cs = append(cs, container{fmt.Sprintf("spec.ephemeralContainers[%d] %q", i, c.Name), c.SecurityContext, c.Env})
	}
	return cs
}

func securityViolations(pod *corev1.Pod) []*vocab.Error {
	var out []*vocab.Error
	add := func(r vocab.Reason, format string, a ...any) { out = append(out, deny(r, format, a...)) }
	const (
		rootHint = "Brewlet runs applications only as non-root; remove it to run as the runtime's user, or set a non-zero id"
		privHint = "Brewlet containers never run with host access or extra privileges"
	)
	spec := &pod.Spec
	for _, h := range []struct {
		on   bool
		name string
	}{{spec.HostNetwork, "hostNetwork"}, {spec.HostPID, "hostPID"}, {spec.HostIPC, "hostIPC"}} {
		if h.on {
			add(vocab.ReasonPrivilegeNotSupported, "spec.%s is true; remove it (%s)", h.name, privHint)
		}
	}
	if psc := spec.SecurityContext; psc != nil {
		if isZero(psc.RunAsUser) {
			add(vocab.ReasonRootNotSupported, "spec.securityContext.runAsUser is 0; %s", rootHint)
		}
		if isZero(psc.RunAsGroup) {
			add(vocab.ReasonRootNotSupported, "spec.securityContext.runAsGroup is 0; %s", rootHint)
		}
		// fsGroup is added to every container's supplementary groups by the kubelet, so
		// fsGroup 0 is membership in the root group.
		if isZero(psc.FSGroup) {
			add(vocab.ReasonRootNotSupported, "spec.securityContext.fsGroup is 0 (the kubelet adds it to every process's groups); %s", rootHint)
		}
		if slices.Contains(psc.SupplementalGroups, 0) {
			add(vocab.ReasonRootNotSupported, "spec.securityContext.supplementalGroups contains 0; remove group 0 (Brewlet runs applications only without root groups)")
		}
		if w := psc.WindowsOptions; w != nil && w.HostProcess != nil && *w.HostProcess {
			add(vocab.ReasonPrivilegeNotSupported, "spec.securityContext.windowsOptions.hostProcess is true; remove it (%s)", privHint)
		}
	}
	for _, c := range containers(pod) {
		sc := c.sc
		if sc == nil {
			continue
		}
		f := c.path + ": securityContext."
		if isZero(sc.RunAsUser) {
			add(vocab.ReasonRootNotSupported, "%srunAsUser is 0; %s", f, rootHint)
		}
		if isZero(sc.RunAsGroup) {
			add(vocab.ReasonRootNotSupported, "%srunAsGroup is 0; %s", f, rootHint)
		}
		if sc.Privileged != nil && *sc.Privileged {
			add(vocab.ReasonPrivilegeNotSupported, "%sprivileged is true; remove it (%s)", f, privHint)
		}
		if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation {
			add(vocab.ReasonPrivilegeNotSupported, "%sallowPrivilegeEscalation is true; remove it or set false (setuid binaries gain nothing in a Brewlet container)", f)
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			add(vocab.ReasonPrivilegeNotSupported, "%scapabilities.add is %v; remove it (Brewlet containers run without capabilities; dropping is fine)", f, sc.Capabilities.Add)
		}
		if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
			add(vocab.ReasonPrivilegeNotSupported, "%sprocMount is Unmasked; remove it or set Default", f)
		}
		if w := sc.WindowsOptions; w != nil && w.HostProcess != nil && *w.HostProcess {
			add(vocab.ReasonPrivilegeNotSupported, "%swindowsOptions.hostProcess is true; remove it (%s)", f, privHint)
		}
	}
	return out
}

func isZero(p *int64) bool { return p != nil && *p == 0 }

// pathWarnings: the shim always replaces PATH with the runtime's, so a pod's PATH is
// silently ignored on the node; say so at admission instead.
func pathWarnings(pod *corev1.Pod) []string {
	var w []string
	for _, c := range containers(pod) {
		for _, e := range c.env {
			if e.Name == "PATH" {
				w = append(w, fmt.Sprintf("%s sets env PATH, which Brewlet ignores: processes always run with the runtime's PATH; call programs by absolute path or remove the variable", c.path))
				break
			}
		}
	}
	return w
}

// requireRuntimeLabel ANDs "vocab.RuntimeLabel(id) in (ready, available)" into every
// required nodeSelectorTerm. Terms are ORed by the scheduler, so adding the requirement to
// one term, or adding a term of its own beside the others, would let the pod land on a node
// without the runtime; with no terms at all, one term carries it alone.
func requireRuntimeLabel(pod *corev1.Pod, id string) {
	req := corev1.NodeSelectorRequirement{
		Key:      vocab.RuntimeLabel(id),
		Operator: corev1.NodeSelectorOpIn,
		Values:   []string{vocab.LabelValueReady, vocab.LabelValueAvailable},
	}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	ns := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(ns.NodeSelectorTerms) == 0 {
		ns.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	andIntoEveryTerm(ns.NodeSelectorTerms, req, false)
}

// andIntoEveryTerm adds req to every term's expressions (or, for a field, its fields) where
// an equal requirement is not there yet, so admitting an admitted pod changes nothing.
func andIntoEveryTerm(terms []corev1.NodeSelectorTerm, req corev1.NodeSelectorRequirement, field bool) {
	same := func(r corev1.NodeSelectorRequirement) bool {
		return r.Key == req.Key && r.Operator == req.Operator && slices.Equal(r.Values, req.Values)
	}
	for i := range terms {
		list := &terms[i].MatchExpressions
		if field {
			list = &terms[i].MatchFields
		}
		if !slices.ContainsFunc(*list, same) {
			*list = append(*list, *req.DeepCopy())
		}
	}
}

// defaultIdentity sets the pod-level runAsUser and runAsGroup from the runtime's user when
// the pod leaves them unset. Pod level, not per container: an explicit container choice
// keeps precedence (it was checked non-root above), and containers added later (ephemeral)
// inherit the default. runAsGroup is defaulted even when runAsUser is explicit: without it
// the group comes from the image's account files, and for an id they do not list that is
// group 0, which the node refuses.
func defaultIdentity(pod *corev1.Pod, u brewletv1.RuntimeUser) {
	if pod.Spec.SecurityContext == nil {
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	psc := pod.Spec.SecurityContext
	if psc.RunAsUser == nil {
		uid := u.UID
		psc.RunAsUser = &uid
	}
	if psc.RunAsGroup == nil {
		gid := u.GID
		psc.RunAsGroup = &gid
	}
}
