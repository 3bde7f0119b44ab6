package vocab

import (
	"errors"
	"fmt"
)

// Reason is a machine-readable refusal or state reason. Every refusal a user can see
// (CRI errors, conditions, events, CLI exits) carries exactly one of these.
type Reason string

// Reasons, grouped by where they arise (docs/provisioner.md, docs/shim.md and
// docs/operator.md say when each is given).
const (
	// Configuration (operator, admission).
	ReasonPoolConflict        Reason = "PoolConflict"
	ReasonUnknownRuntimeImage Reason = "UnknownRuntimeImage"
	// PoolKeyForgeable: a NodeProfile's pool key is one a kubelet can set on its own Node
	// (not under node-restriction.kubernetes.io/), or one of Brewlet's own; it serves no node.
	ReasonPoolKeyForgeable Reason = "PoolKeyForgeable"
	// RuntimeNotOffered: no NodeProfile offers a pod's runtime to any node pool, so no node
	// may run it (pod admission).
	ReasonRuntimeNotOffered Reason = "RuntimeNotOffered"

	// NodeProfile readiness (operator, condition Ready).
	ReasonNodesReady    Reason = "NodesReady"    // every assigned node reports every Eager ID Ready
	ReasonNodesNotReady Reason = "NodesNotReady" // some assigned node does not (yet)

	// Rotation (operator, conditions RotationProgressing and RotationComplete).
	ReasonRotating        Reason = "Rotating"        // nodes are not on the target generation yet
	ReasonRotationHalted  Reason = "RotationHalted"  // more nodes failed the target than rollout.maxFailures
	ReasonAllNodesCurrent Reason = "AllNodesCurrent" // every reporting node serves the target
	// CompleteWithExclusions: every reporting node serves the target except excluded ones:
	// failed within rollout.maxFailures (they keep their generation), timed out
	// (NodeTimedOut) or silent (AgentNotReporting).
	ReasonCompleteWithExclusions Reason = "CompleteWithExclusions"
	ReasonNoNodes                Reason = "NoNodes" // no node reports the ID yet
	// RotationPaused: spec.paused holds the rotation (no new wave, no new restart).
	ReasonRotationPaused Reason = "RotationPaused"
	// NodeTimedOut: a node allowed the target neither serves nor failed it past its
	// installBy (rollout.nodeTimeout); it is excluded from the rotation until it reports.
	ReasonNodeTimedOut Reason = "NodeTimedOut"
	// ReportInvalid: a node's report cannot be believed (no observedAt, a malformed node UID,
	// a generation the operator never assigned, the target served under another digest); it
	// is excluded like a stuck node until it reports something believable.
	ReasonReportInvalid Reason = "ReportInvalid"

	// Cleanup (operator, NodeProfile conditions CleanupComplete and RetirementPending).
	ReasonNothingOwed         Reason = "NothingOwed"         // no node owes this profile any cleanup
	ReasonCleanupPending      Reason = "CleanupPending"      // some node still owes cleanup (named, with the steps)
	ReasonRetirementPending   Reason = "RetirementPending"   // a node owing cleanup is gone or was recreated
	ReasonNoRetirementPending Reason = "NoRetirementPending" // every node owing cleanup still exists

	// Nodes whose agent does not run and report (operator, NodeProfile status.nodesWithoutAgent).
	ReasonAgentPodMissing       Reason = "AgentPodMissing"       // no agent pod on the node
	ReasonAgentPodPending       Reason = "AgentPodPending"       // unscheduled, or not started yet
	ReasonAgentContainerFailing Reason = "AgentContainerFailing" // waiting: CreateContainerError, ImagePullBackOff, CrashLoopBackOff, …
	ReasonAgentNotReporting     Reason = "AgentNotReporting"     // the pod runs, the heartbeat is stale

	// Containers on older generations (operator, condition OldGenerationTasks).
	ReasonOldGenerationTasks   Reason = "OldGenerationTasks"   // some node reports containers on an older generation or epoch
	ReasonNoOldGenerationTasks Reason = "NoOldGenerationTasks" // every reported container runs the current generation

	// Artifact recognition and content (CLI at build time, shim at container create).
	ReasonLayerPathViolation       Reason = "LayerPathViolation"
	ReasonUnsupportedArtifact      Reason = "UnsupportedArtifact"
	ReasonInvalidLaunchConfig      Reason = "InvalidLaunchConfig"
	ReasonLaunchConfigMismatch     Reason = "LaunchConfigMismatch"
	ReasonRuntimeImageIncompatible Reason = "RuntimeImageIncompatible"
	ReasonInvalidImageReference    Reason = "InvalidImageReference"

	// Runtime selection and authorization (shim).
	ReasonRuntimeImageRequired             Reason = "RuntimeImageRequired"
	ReasonInvalidRuntimeImageID            Reason = "InvalidRuntimeImageID"
	ReasonRuntimeImageNotInstalled         Reason = "RuntimeImageNotInstalled"
	ReasonRuntimeImageRevoked              Reason = "RuntimeImageRevoked"
	ReasonRuntimeImageAuthorizationExpired Reason = "RuntimeImageAuthorizationExpired"
	ReasonRuntimeImageEpochMismatch        Reason = "RuntimeImageEpochMismatch"
	ReasonRuntimeImageUpdating             Reason = "RuntimeImageUpdating"
	ReasonRuntimeImageInstalling           Reason = "RuntimeImageInstalling"
	ReasonNodeNotReady                     Reason = "NodeNotReady"

	// Process rules (shim).
	ReasonRootNotSupported     Reason = "RootNotSupported"
	ReasonExecStateUnavailable Reason = "ExecStateUnavailable"
	// PrivilegeNotSupported: the container spec asks for more than Brewlet's process
	// boundary allows (host devices, host namespaces, device-owning groups, restore from a
	// checkpoint, ...), whatever admission let through.
	ReasonPrivilegeNotSupported Reason = "PrivilegeNotSupported"
	// UserNamespaceUnsupported: a container in a user namespace whose layers this node cannot
	// map into it (mappings out of bounds or differing from containerd's snapshot, a
	// filesystem or kernel without idmapped mounts, a handler containerd cannot give the
	// container's I/O owner).
	ReasonUserNamespaceUnsupported Reason = "UserNamespaceUnsupported"

	// Bounds (shim validation, provisioner installs): an input larger or slower than the
	// node accepts (entries, path bytes, uncompressed bytes, deadlines).
	ReasonLimitExceeded Reason = "LimitExceeded"

	// Runtime (golden) image validation and installation (CLI, provisioner).
	ReasonInvalidRuntimePath  Reason = "InvalidRuntimePath"
	ReasonInvalidAccountFiles Reason = "InvalidAccountFiles"
	// RuntimePromiseBroken: a runtime image removes or changes what the one before it under
	// the same ID promised its applications (internal/promise; docs/rotation.md).
	ReasonRuntimePromiseBroken   Reason = "RuntimePromiseBroken"
	ReasonPrivilegedRuntimeFile  Reason = "PrivilegedRuntimeFile"
	ReasonPlatformUnavailable    Reason = "PlatformUnavailable"
	ReasonDigestMismatch         Reason = "DigestMismatch"
	ReasonRuntimeImagePullFailed Reason = "RuntimeImagePullFailed"
	// RegistryCertificateInvalid: a registry or mirror presented a certificate the node does
	// not trust (an unknown authority, expired or not yet valid, issued for another host
	// name). Not a verdict on the content: the install is tried again later.
	ReasonRegistryCertificateInvalid Reason = "RegistryCertificateInvalid"
	// RegistryCredentialsRefused: a registry or mirror answered 401 or 403 (no credentials
	// for it, or ones it refused). Not a verdict on the content either.
	ReasonRegistryCredentialsRefused Reason = "RegistryCredentialsRefused"
	// CredentialProviderFailed: a kubelet credential provider plugin of the node, asked for a
	// registry's credentials, failed, timed out or answered something unusable.
	ReasonCredentialProviderFailed Reason = "CredentialProviderFailed"

	// Signatures (operator condition SignatureVerified and Approved, provisioner installs,
	// CLI). Neither is a final verdict on the content: a signature may be attached later.
	// SignatureMissing: no Sigstore bundle for the digest was found on any source.
	ReasonSignatureMissing Reason = "SignatureMissing"
	// SignatureInvalid: bundles were found, but none verifies for the digest under a key
	// the requirement names (another key, another digest, damaged bytes), or a
	// requirement's key cannot be read.
	ReasonSignatureInvalid Reason = "SignatureInvalid"
	// SignatureUnverifiable: the signatures could not be looked up (the registry did not
	// answer); the operator keeps what it decided before and looks again.
	ReasonSignatureUnverifiable Reason = "SignatureUnverifiable"
	// SignatureVerified: every requirement is met (condition SignatureVerified=True).
	ReasonSignatureVerified Reason = "SignatureVerified"

	// Node integration (provisioner).
	ReasonContainerdConfigFailed Reason = "ContainerdConfigFailed"
	// ContainerdUnsupported: the node's containerd is a release Brewlet cannot run on (1.x:
	// no task API v3), or its version cannot be read; the agent changes nothing on the node.
	ReasonContainerdUnsupported Reason = "ContainerdUnsupported"
	// InvalidStartupTaint: a startup taint key the agent was told to remove is not a taint
	// key, or is one Kubernetes itself manages (the agent refuses to start).
	ReasonInvalidStartupTaint Reason = "InvalidStartupTaint"

	// Rotation restarts (operator).
	ReasonRestartNotApplicable Reason = "RestartNotApplicable"
	ReasonRestartDeferred      Reason = "RestartDeferred"
	// RestartsHalted: more restarted workloads failed than the restart failure budget; the
	// record of a workload still waiting, and the event on the RuntimeImage.
	ReasonRestartsHalted Reason = "RestartsHalted"
	// FailedStarts: containers failed to start on a rotation's target generation on more
	// nodes than rollout.maxFailures (a rollback's reason, a restart halt's record).
	ReasonFailedStarts Reason = "FailedStarts"
	// RolledBack: the operator assigned the generation before a failed one again (the
	// RuntimeImage's Warning event and its RotationProgressing condition).
	ReasonRolledBack Reason = "RolledBack"
	// RollbackUnavailable: restarts halted on a generation that spec.onFailure would roll
	// back, but there is nothing to go back to (the first generation of an epoch) or the
	// previous digest's signature no longer verifies; nodes keep the generation.
	ReasonRollbackUnavailable Reason = "RollbackUnavailable"
	// OutsideRestartWindow: restarts start only in the operator's restart window; the
	// record of a workload waiting for it.
	ReasonOutsideRestartWindow Reason = "OutsideRestartWindow"

	// RuntimeImage approval (operator, condition Approved).
	ReasonApproved Reason = "Approved" // approved: nodes may authorize the current generation
	ReasonRevoked  Reason = "Revoked"  // spec.revoked, the administrator's kill switch
	ReasonDeleting Reason = "Deleting" // being deleted: revoked until every node withdrew the epoch
)

// Error is a refusal: a Reason and a message saying what happened, to what, and what to
// do about it. Callers read the reason with ReasonOf, never by matching message text.
type Error struct {
	Reason  Reason
	Message string
	Err     error // optional cause
}

// Error renders "<Reason>: <message>", the form users see in kubectl describe and crictl.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Reason, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Reason, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds a refusal with a formatted message.
func Errorf(r Reason, format string, args ...any) error {
	return &Error{Reason: r, Message: fmt.Sprintf(format, args...)}
}

// Wrap builds a refusal that keeps its cause.
func Wrap(r Reason, err error, format string, args ...any) error {
	return &Error{Reason: r, Message: fmt.Sprintf(format, args...), Err: err}
}

// ReasonOf returns the reason of the first refusal in err's chain, or "" if there is none.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Find returns the first refusal with reason r anywhere in err's chain (ReasonOf sees only
// the outermost), or nil.
func Find(err error, r Reason) *Error {
	for err != nil {
		if e, ok := err.(*Error); ok && e.Reason == r {
			return e
		}
		err = errors.Unwrap(err)
	}
	return nil
}
