// Package vocab is Brewlet's single vocabulary: every label, annotation, finalizer,
// condition type, state and reason code the components exchange is declared here once, so
// that the operator, the provisioner, the shim and the CLI can never drift apart on a
// spelling. Nothing else in the project spells these strings.
package vocab

import "strings"

// Domain is the prefix of every Brewlet label and annotation.
const Domain = "brewlet.sh"

// API group of Brewlet's resources.
const (
	Group   = "node." + Domain
	Version = "v1alpha1"
)

// RuntimeClass and containerd handler.
const (
	// RuntimeClassName is the Kubernetes RuntimeClass and the CRI runtime handler name.
	RuntimeClassName = "brewlet"
	// ShimRuntimeType is containerd's runtime_type for the Brewlet shim; containerd maps it
	// to the binary name containerd-shim-brewlet-v2.
	ShimRuntimeType = "io.containerd.brewlet.v2"
	// ShimBinaryName is the shim's executable name on containerd's PATH.
	ShimBinaryName = "containerd-shim-brewlet-v2"
	// PodAnnotationPassthrough is the CRI pod_annotations pattern containerd forwards to
	// the shim's OCI spec.
	PodAnnotationPassthrough = Domain + "/*"
)

// Node labels. Their only writer is the node's own provisioner. The two that steer Brewlet
// pods onto a node (the RuntimeClass's node selector and the per-ID affinity) live under
// node-restriction.kubernetes.io/, a prefix the NodeRestriction admission plugin forbids
// kubelets to set on their own Node: a compromised node cannot claim a runtime to attract
// Brewlet pods and, through the node authorizer, their Secrets.
const (
	// LabelRuntime is "ready" on a node that can start Brewlet containers at all.
	LabelRuntime = NodeRestrictionPrefix + "brewlet"
	// LabelRuntimePrefix + <id> is ready or available for each runtime ID the node offers
	// (MaxRuntimeIDLength keeps the key's name within the 63 characters labels allow).
	LabelRuntimePrefix = NodeRestrictionPrefix + "brewlet."
	// NodeRestrictionPrefix is the label prefix kubelets may not set.
	NodeRestrictionPrefix = "node-restriction.kubernetes.io/"
	// LabelRuntimeInfo mirrors LabelRuntime for people (kubectl get nodes -L
	// brewlet.sh/runtime). Kubelets can forge it, so nothing schedules or admits by it.
	LabelRuntimeInfo = Domain + "/runtime"
	// LegacyLabelRuntimePrefix + <id> is the per-ID key of releases before node-restriction
	// labels; nothing reads it, and agents remove it from their node (docs/install.md,
	// "Upgrading").
	LegacyLabelRuntimePrefix = Domain + "/runtime."
	// LabelValueReady: installed and authorized.
	LabelValueReady = "ready"
	// LabelValueAvailable: offered OnDemand, installed at first use.
	LabelValueAvailable = "available"
	// LabelHostChanges is "present" while the node holds host changes Brewlet made (shim,
	// containerd handler): the agent's DaemonSet keeps running there until they are
	// reversed, even after the node left every pool. A kubelet cannot set it, so it cannot
	// draw an agent (and its token and Secrets) onto a node outside the pools.
	LabelHostChanges = NodeRestrictionPrefix + "brewlet-host-changes"
	// LegacyLabelHostChanges is LabelHostChanges of releases before it moved under
	// node-restriction.kubernetes.io/; nothing places by it, and agents remove it.
	LegacyLabelHostChanges = Domain + "/host-changes"
	// ReservedPoolKeyPrefix: node-restriction keys starting with it are Brewlet's own
	// (the agent may write them), never a pool key.
	ReservedPoolKeyPrefix = NodeRestrictionPrefix + "brewlet"
	// LabelValuePresent is LabelHostChanges' value.
	LabelValuePresent = "present"
)

// AgentPodLabels select the node agents' pods (the chart's DaemonSet) in their namespace.
var AgentPodLabels = map[string]string{"app.kubernetes.io/name": "brewlet-provisioner", "app.kubernetes.io/component": "provisioner"}

// RuntimeLabel is the per-ID capability label key of a node.
func RuntimeLabel(id string) string { return LabelRuntimePrefix + id }

// OwnNodeLabel reports whether a Node label key is Brewlet's (set and removed only by the
// node's agent): brewlet.sh/* (the legacy keys), the runtime keys and host changes.
func OwnNodeLabel(key string) bool {
	return strings.HasPrefix(key, Domain+"/") || key == LabelRuntime || strings.HasPrefix(key, LabelRuntimePrefix) || key == LabelHostChanges
}

// Annotations.
const (
	// AnnotationRuntimeImage names the runtime ID a pod runs on.
	AnnotationRuntimeImage = Domain + "/runtime-image"
	// AnnotationRotatedToGeneration is the pod-template barrier {id, epoch, generation}
	// the operator sets to restart a workload after a rotation.
	AnnotationRotatedToGeneration = Domain + "/rotated-to-generation"
	// AnnotationRestartOnRotation is the workload owner's opt-in ("true") on the
	// Deployment/StatefulSet/DaemonSet object.
	AnnotationRestartOnRotation = Domain + "/restart-on-rotation"
	// AnnotationRestartPriority on the workload object orders its restart: higher first
	// (an integer from -1000 to 1000; default 0; anything else counts as 0). Platform teams
	// put canaries first so a bad generation halts restarts before it reaches the rest.
	AnnotationRestartPriority = Domain + "/restart-priority"
	// AnnotationRotationsPaused on RuntimeClass brewlet pauses every rotation (waves and
	// restarts) of every RuntimeImage while set to anything but "false".
	AnnotationRotationsPaused = Domain + "/rotations-paused"
	// AnnotationArtifactVersion marks an application artifact's manifest.
	AnnotationArtifactVersion = Domain + "/artifact-version"
	// ArtifactVersion is the only artifact version this release understands.
	ArtifactVersion = "2"
	// AnnotationLayer gives each artifact layer its role.
	AnnotationLayer = Domain + "/layer"
)

// Artifact layer roles (values of AnnotationLayer).
const (
	LayerApp        = "app"
	LayerDependency = "dependency"
	LayerLaunch     = "launch"
)

// Finalizers.
const (
	// FinalizerRevocation holds a RuntimeImage until every node withdrew its labels and
	// authorizations for that epoch.
	FinalizerRevocation = Group + "/revocation"
	// FinalizerCleanup holds a NodeProfile until every node it changed is cleaned up.
	FinalizerCleanup = Group + "/cleanup"
)

// ConditionType is a status condition type of a Brewlet resource.
type ConditionType string

// RuntimeImage conditions.
const (
	ConditionApproved            ConditionType = "Approved"
	ConditionRotationProgressing ConditionType = "RotationProgressing"
	ConditionRotationComplete    ConditionType = "RotationComplete"
	ConditionOldGenerationTasks  ConditionType = "OldGenerationTasks"
	// RolledBack is present while the current generation is a rollback: it serves the
	// generation before a failed one again (status.rolledBack).
	ConditionRolledBack ConditionType = "RolledBack"
	// SignatureVerified is present only while a signature is required (spec.verification or
	// the cluster's signature keys).
	ConditionSignatureVerified ConditionType = "SignatureVerified"
)

// NodeProfile conditions.
const (
	ConditionReady             ConditionType = "Ready"
	ConditionCleanupComplete   ConditionType = "CleanupComplete"
	ConditionRetirementPending ConditionType = "RetirementPending"
)

// RuntimeState is the state of one runtime ID on one node (NodeRuntime status).
type RuntimeState string

const (
	StateInstalling RuntimeState = "Installing"
	StateReady      RuntimeState = "Ready"
	StateFailed     RuntimeState = "Failed"
	StateAvailable  RuntimeState = "Available"
	StateRevoked    RuntimeState = "Revoked"
)

// InstallMode says when a node installs a runtime a profile offers.
type InstallMode string

const (
	InstallEager    InstallMode = "Eager"
	InstallOnDemand InstallMode = "OnDemand"
)

// ContainerdRestart says whether the provisioner may change and restart containerd.
type ContainerdRestart string

const (
	ContainerdRestartValidated ContainerdRestart = "validated"
	ContainerdRestartNone      ContainerdRestart = "none"
)

// RetirementPhase is the phase of a NodeRetirementEvidence.
type RetirementPhase string

const (
	RetirementBlocked  RetirementPhase = "Blocked"
	RetirementAccepted RetirementPhase = "Accepted"
	RetirementResolved RetirementPhase = "Resolved"
)

// ID grammar of runtime IDs (RuntimeImage names): a lowercase DNS subdomain of at most
// MaxRuntimeIDLength characters. The same expression is enforced by the API server (CEL)
// and by ValidRuntimeID for bytes that reach a node.
const (
	RuntimeIDPattern   = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	MaxRuntimeIDLength = 55
)

// CRI annotations containerd puts on every OCI spec (a stable CRI contract; containerd's
// own constants live in an internal package).
const (
	CRIContainerType        = "io.kubernetes.cri.container-type"
	CRIContainerTypeSandbox = "sandbox"
	CRISandboxName          = "io.kubernetes.cri.sandbox-name"
	CRISandboxNamespace     = "io.kubernetes.cri.sandbox-namespace"
	CRISandboxUID           = "io.kubernetes.cri.sandbox-uid"
	CRIContainerName        = "io.kubernetes.cri.container-name"
)

// EnvHostPrefix relocates the node's host layout (tests); containerd hands it to shims
// through its shim manager env.
const EnvHostPrefix = "BREWLET_HOST_PREFIX"

// EnvOnDemandWait bounds the shim's wait for an OnDemand install (default 30s).
const EnvOnDemandWait = "BREWLET_ONDEMAND_WAIT"

// EnvSlowLaunch is the create duration above which the shim logs each step's time
// (default 1s; 0s: every create).
const EnvSlowLaunch = "BREWLET_SLOW_LAUNCH"

// EnvShimProfileDir, when set, makes the shim write a CPU and an allocation profile of
// each application container's create into that directory (docs/shim.md, "Profiling").
const EnvShimProfileDir = "BREWLET_SHIM_PROFILE_DIR"

// EnvDevRoot relocates the device tree the shim scans for device-owning groups (tests;
// default /dev).
const EnvDevRoot = "BREWLET_DEV_ROOT"

// AgentLeasePrefix names each node's agent Lease (AgentLeasePrefix + node name) in the
// agents' namespace: it fences writers (one agent per node) and is the node's heartbeat.
const AgentLeasePrefix = "brewlet-provisioner-"
