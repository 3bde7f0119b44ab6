package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// RuntimeImageSpec is a platform team's approval of one digest-pinned runtime image under
// a stable ID (the object's name).
type RuntimeImageSpec struct {
	// Source names the image. Changing source.image is a rotation.
	Source RuntimeImageSource `json:"source"`

	// User is the numeric identity the runtime's account files define for applications.
	// It is part of the ID's compatibility promise and cannot change.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.user is immutable: it is part of the runtime ID's compatibility promise; create a RuntimeImage with a new ID for a different user"
	User RuntimeUser `json:"user"`

	// Description is informational.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`

	// Compatibility describes what applications on this ID may rely on, and names the one
	// digest accepted as breaking it (acceptBreaking).
	// +optional
	Compatibility *Compatibility `json:"compatibility,omitempty"`

	// Revoked is the administrator's kill switch. True makes the operator set
	// Approved=False (reason Revoked): no new container starts with this ID on any node
	// within the authorization expiry, while running containers keep going. Setting it back
	// to false re-approves the same epoch (same UID, generations continue).
	// +optional
	// +kubebuilder:default=false
	Revoked bool `json:"revoked,omitempty"`

	// Verification requires every digest of this ID to be signed before brewlet-operator
	// approves it and before any node installs it: a Sigstore bundle attached to the digest
	// (an OCI referrer) by one of these keys or keyless identities. The cluster's
	// requirement, when the chart sets one (verification.publicKeys, verification.keyless),
	// applies as well and cannot be lifted here (docs/signatures.md).
	// +optional
	Verification *Verification `json:"verification,omitempty"`

	// Paused holds this runtime's rotation where it is: no further node is allowed a newer
	// generation (nodes already allowed one finish it) and no further workload restart
	// starts (restarts in progress finish). Authorization is unaffected: a paused runtime
	// keeps serving; spec.revoked is the kill switch. The first generation of an epoch is
	// not staged and so not paused. Setting it back to false resumes.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// OnFailure is what brewlet-operator does when workloads restarted onto the current
	// generation fail past the restart failure budget (status.rotation.restartsHalted):
	// RollBack (the default) assigns the generation before it again, as a new generation
	// every node serves at once from what it has installed, and restarts the workloads
	// already moved back onto it; Halt only stops further restarts, and nodes keep the new
	// generation (docs/rotation.md, "Rollback").
	// +kubebuilder:validation:Enum=RollBack;Halt
	// +kubebuilder:default=RollBack
	// +optional
	OnFailure string `json:"onFailure,omitempty"`
}

// OnFailure values.
const (
	OnFailureRollBack = "RollBack"
	OnFailureHalt     = "Halt"
)

// RuntimeImageSource is where the runtime comes from.
type RuntimeImageSource struct {
	// Image is registry/repository@sha256:<64 lowercase hex>: an image index (the node's
	// platform is chosen per node) or a single manifest. Tags are refused.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[0-9]+)?(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)+@sha256:[a-f0-9]{64}$')",message="source.image must be registry/repository@sha256:<64 lowercase hex digits>; tags are not accepted, pin the image by digest (for example with 'crane digest')"
	Image string `json:"image"`
}

// Verification names who must have signed a runtime digest: a signature by any one of
// the keys or identities meets it.
// +kubebuilder:validation:XValidation:rule="size(self.publicKeys) + size(self.keyless) > 0",message="spec.verification names no public key and no keyless identity; name at least one, or remove spec.verification"
type Verification struct {
	// PublicKeys are PEM public keys (ECDSA, RSA or Ed25519, "-----BEGIN PUBLIC KEY-----"),
	// one per entry.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=4096
	// +listType=atomic
	// +kubebuilder:default={}
	PublicKeys []string `json:"publicKeys"`
	// Keyless are identities of keyless (Fulcio) signing certificates, checked against the
	// cluster's trusted root (chart value verification.trustedRoot).
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +kubebuilder:default={}
	Keyless []KeylessIdentity `json:"keyless"`
}

// KeylessIdentity is who a keyless signing certificate must name: the OIDC issuer that
// vouched for the signer, and the signer (the certificate's subject alternative name: an
// e-mail address or a URI such as a CI workflow), exactly or by a regular expression that
// must match all of it.
// +kubebuilder:validation:XValidation:rule="has(self.subject) != has(self.subjectRegExp)",message="a keyless identity names exactly one of subject and subjectRegExp"
type KeylessIdentity struct {
	// Issuer is the OIDC issuer URL, exactly (e.g. https://token.actions.githubusercontent.com).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Issuer string `json:"issuer"`
	// Subject is the signer, exactly.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Subject string `json:"subject,omitempty"`
	// SubjectRegExp matches the whole signer (Go syntax; anchored: it must match the whole
	// subject, not a part of it).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	SubjectRegExp string `json:"subjectRegExp,omitempty"`
}

// RuntimeUser is a non-root numeric identity.
type RuntimeUser struct {
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	UID int64 `json:"uid"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	GID int64 `json:"gid"`
}

// Compatibility describes the promise an ID makes across rotations.
type Compatibility struct {
	// Ecosystem, for example "python-3.12" or "jre-21".
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Ecosystem string `json:"ecosystem,omitempty"`
	// ABI, for example "glibc-2.36-amd64".
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ABI string `json:"abi,omitempty"`
	// AcceptBreaking names the one digest (sha256:...) a node may install although it
	// removes or changes what the generation the node serves promised (its version line,
	// user, PATH and executables, libraries, interpreters or environment; docs/rotation.md).
	// Every other digest that breaks the promise is refused (RuntimePromiseBroken), so a
	// later digest is checked again.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	AcceptBreaking string `json:"acceptBreaking,omitempty"`
}

// RuntimeImageStatus is written by the operator.
type RuntimeImageStatus struct {
	// Epoch is the object's UID: a recreated RuntimeImage of the same name starts anew.
	// +optional
	Epoch types.UID `json:"epoch,omitempty"`
	// Generation counts source.image changes within the epoch, starting at 1.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// Digest is the digest of the current generation.
	// +optional
	Digest string `json:"digest,omitempty"`
	// Image is where the current generation comes from: spec.source.image when the
	// generation was assigned (or its repository last changed with the same digest), or the
	// image of the generation a rollback serves again.
	// +optional
	Image string `json:"image,omitempty"`
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// TaskObservations lists, per node, containers still on an older generation or a
	// previous epoch. Diagnosis only: cleanup never trusts it. Bounded in size. Always
	// written, empty when no container is behind, so that `.status.taskObservations[]`
	// iterates nothing rather than failing on a missing field.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	TaskObservations []TaskObservation `json:"taskObservations"`
	// OmittedNodes counts nodes left out of taskObservations to bound the object's size.
	// +optional
	OmittedNodes int32 `json:"omittedNodes,omitempty"`
	// Rotation is the progress of the current generation across nodes.
	// +optional
	Rotation *RotationStatus `json:"rotation,omitempty"`
	// Previous is the generation of this epoch the current one replaced: what a rollback
	// goes back to.
	// +optional
	Previous *GenerationRef `json:"previous,omitempty"`
	// RolledBack records the epoch's last rollback: a generation that failed workloads and
	// the generation assigned to serve the one before it again. Kept until the next
	// generation is assigned.
	// +optional
	RolledBack *Rollback `json:"rolledBack,omitempty"`
}

// GenerationRef is one generation of an epoch and its digest.
type GenerationRef struct {
	Generation int64  `json:"generation"`
	Digest     string `json:"digest"`
	// Image is where it came from (registry/repository@digest; empty when not recorded).
	// +optional
	Image string `json:"image,omitempty"`
}

// Rollback is a generation that failed workloads and what replaced it. Generation serves
// To's digest again: nodes install it from what they already have, and containers on To
// count as on Generation (the same bytes). While spec.source.image names Bad's digest, it
// is not assigned again (Released: the spec has named another digest since, so naming it
// once more is a new decision).
type Rollback struct {
	Generation int64         `json:"generation"`
	To         GenerationRef `json:"to"`
	Bad        GenerationRef `json:"bad"`
	// Reason is why (RestartsHalted), Message what failed and what to do.
	Reason  string      `json:"reason"`
	Message string      `json:"message"`
	At      metav1.Time `json:"at"`
	// +optional
	Released bool `json:"released,omitempty"`
}

// PullFrom is where g can be pulled from: the image recorded with it, else specImage's
// repository at g's digest (a status written before images were recorded, or a record that
// does not name g's digest).
func (g GenerationRef) PullFrom(specImage string) string {
	if _, d, ok := strings.Cut(g.Image, "@"); ok && d == g.Digest {
		return g.Image
	}
	repo, _, _ := strings.Cut(specImage, "@")
	return repo + "@" + g.Digest
}

// SameBytes reports whether a container on generation g of the status's epoch runs what
// the current generation serves: g is the current generation, or the one a rollback to
// it serves again.
func (st *RuntimeImageStatus) SameBytes(g int64) bool {
	if g == st.Generation {
		return true
	}
	rb := st.RolledBack
	return rb != nil && rb.Generation == st.Generation && rb.To.Generation == g && rb.To.Digest == st.Digest
}

// RollbackInEffect is the rollback that assigned the current generation (nil: none).
func (st *RuntimeImageStatus) RollbackInEffect() *Rollback {
	if rb := st.RolledBack; rb != nil && rb.Generation == st.Generation && rb.To.Digest == st.Digest {
		return rb
	}
	return nil
}

// TaskObservation is one node's report of containers on an older generation or epoch.
type TaskObservation struct {
	NodeName string    `json:"nodeName"`
	NodeUID  types.UID `json:"nodeUID"`
	// Current is false when the node's report is stale; its last bindings are kept.
	Current    bool        `json:"current"`
	ObservedAt metav1.Time `json:"observedAt"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Bindings []TaskBinding `json:"bindings,omitempty"`
	// Omitted counts bindings left out on this node.
	// +optional
	Omitted int32 `json:"omitted,omitempty"`
}

// TaskBinding is one running container and the runtime generation it started on.
type TaskBinding struct {
	PodNamespace  string    `json:"podNamespace"`
	PodName       string    `json:"podName"`
	PodUID        types.UID `json:"podUID"`
	ContainerName string    `json:"containerName"`
	Epoch         types.UID `json:"epoch"`
	Generation    int64     `json:"generation"`
}

// RotationStatus is the fleet's progress towards the target generation.
type RotationStatus struct {
	Target RotationTarget `json:"target"`
	// +optional
	Nodes RotationNodeCounts `json:"nodes,omitempty"`
	// RotationCompletedAt is set once per target, when every assigned node is current.
	// +optional
	RotationCompletedAt *metav1.Time `json:"rotationCompletedAt,omitempty"`
	// +optional
	// +listType=atomic
	ExcludedNodes []ExcludedNode `json:"excludedNodes,omitempty"`
	// Restarts are per-workload records, at most 100: those holding a slot, then failures,
	// successes, waiting and settled ones. RestartCounts counts every workload.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Restarts []WorkloadRestart `json:"restarts,omitempty"`
	// RestartCounts counts the opted-in workloads of this target by outcome, all of them
	// (restarts may list fewer).
	// +optional
	RestartCounts *RestartCounts `json:"restartCounts,omitempty"`
	// RestartsHalted is set while more restarted workloads of this target failed than the
	// operator's restart failure budget: no further restart starts; running ones finish.
	// A new digest (a roll-back too) is a new target and starts afresh.
	// +optional
	RestartsHalted *RestartsHalt `json:"restartsHalted,omitempty"`
	// FailedStarts counts the containers the nodes saw fail to start on the target
	// generation (any container, restarted by the operator or not), while the target is
	// unproven. More nodes with one than the profiles' rollout.maxFailures fail the target
	// as failed restarts do: restarts halt, and spec.onFailure decides about a rollback.
	// +optional
	FailedStarts *FailedStarts `json:"failedStarts,omitempty"`
}

// IsExceeded says whether f exists and went past its budget.
func (f *FailedStarts) IsExceeded() bool { return f != nil && f.Exceeded }

// FailedStarts sums the nodes' failed starts on a rotation's target generation.
type FailedStarts struct {
	// Nodes counts the nodes reporting at least one (a node counts once, however many it
	// reports: no single node fails a target for the fleet); Pods counts the pods.
	Nodes int32 `json:"nodes"`
	Pods  int32 `json:"pods"`
	// MaxFailures is the budget Nodes is held to; Exceeded says Nodes went past it.
	MaxFailures int32 `json:"maxFailures"`
	// +optional
	Exceeded bool `json:"exceeded,omitempty"`
	// Message names the failing containers (at most five) and their nodes.
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// RestartsHalt says why rotation restarts stopped for a target.
type RestartsHalt struct {
	// Failed counts the target's failed restarts; MaxFailures is the budget they exceed.
	Failed      int32 `json:"failed"`
	MaxFailures int32 `json:"maxFailures"`
	// Message names the failing workloads (at most five) and what to do.
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// RestartCounts counts workload restarts by outcome.
type RestartCounts struct {
	Pending       int32 `json:"pending"`
	InProgress    int32 `json:"inProgress"`
	Succeeded     int32 `json:"succeeded"`
	Failed        int32 `json:"failed"`
	Deferred      int32 `json:"deferred"`
	NotApplicable int32 `json:"notApplicable"`
}

// RotationTarget is the generation a rotation moves to.
type RotationTarget struct {
	Generation int64       `json:"generation"`
	Digest     string      `json:"digest"`
	AssignedAt metav1.Time `json:"assignedAt"`
}

// RotationNodeCounts counts assigned nodes by state.
type RotationNodeCounts struct {
	Current    int32 `json:"current"`
	Installing int32 `json:"installing"`
	Failed     int32 `json:"failed"`
	// Excluded counts the nodes the rotation goes on without: failed ones and stuck ones.
	Excluded int32 `json:"excluded"`
	// Stuck counts excluded nodes that neither serve nor failed the target: past their
	// installBy (NodeTimedOut) or with a silent agent (AgentNotReporting).
	// +optional
	Stuck int32 `json:"stuck"`
}

// ExcludedNode is a node left out of the rotation and why.
type ExcludedNode struct {
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
	Reason     string    `json:"reason"`
	Generation int64     `json:"generation"`
}

// WorkloadRestart is the outcome of one opted-in workload's restart.
type WorkloadRestart struct {
	// +kubebuilder:validation:Enum=Deployment;StatefulSet;DaemonSet
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// +kubebuilder:validation:Enum=Pending;InProgress;Succeeded;Failed;Deferred;NotApplicable
	Outcome string `json:"outcome"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
}

// RuntimeImage approves one digest-pinned runtime image under a stable ID (its name).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ri,categories=brewlet
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.status.generation`
// +kubebuilder:printcolumn:name="Approved",type=string,JSONPath=`.status.conditions[?(@.type=="Approved")].status`
// +kubebuilder:printcolumn:name="Rotated",type=string,JSONPath=`.status.conditions[?(@.type=="RotationComplete")].status`
// +kubebuilder:printcolumn:name="Current-Nodes",type=integer,JSONPath=`.status.rotation.nodes.current`
// +kubebuilder:printcolumn:name="Failed-Nodes",type=integer,JSONPath=`.status.rotation.nodes.failed`
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.paused`
// +kubebuilder:printcolumn:name="Rotation",type=string,JSONPath=`.status.conditions[?(@.type=="RotationProgressing")].reason`
// +kubebuilder:printcolumn:name="Restarts-Halted",type=integer,JSONPath=`.status.rotation.restartsHalted.failed`,priority=1
// +kubebuilder:printcolumn:name="Old-Tasks",type=string,JSONPath=`.status.conditions[?(@.type=="OldGenerationTasks")].status`
// +kubebuilder:printcolumn:name="Rolled-Back-From",type=string,JSONPath=`.status.rolledBack.bad.digest`,priority=1
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.source.image`,priority=1
// +kubebuilder:printcolumn:name="Serving",type=string,JSONPath=`.status.image`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 55",message="a RuntimeImage name is a runtime ID of at most 55 characters"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="a RuntimeImage name is a runtime ID: a lowercase DNS subdomain without '@', ':' or '/'"
type RuntimeImage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RuntimeImageSpec `json:"spec"`
	// +optional
	Status RuntimeImageStatus `json:"status,omitempty"`
}

// RuntimeImageList is a list of RuntimeImages.
//
// +kubebuilder:object:root=true
type RuntimeImageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RuntimeImage `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &RuntimeImage{}, &RuntimeImageList{})
}
