package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NodeRuntimeSpec holds the operator's per-ID directives for one node.
type NodeRuntimeSpec struct {
	// ContainerdRestart is the node's containerd registration mode, copied by the operator
	// from the node's NodeProfile: validated (register the brewlet handler, restart,
	// health-check, roll back on failure) or none (the node image has the handler). Empty:
	// the agent's --containerd-restart flag decides.
	// +optional
	// +kubebuilder:validation:Enum=validated;none
	ContainerdRestart string `json:"containerdRestart,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=id
	Runtimes []RuntimeDirective `json:"runtimes,omitempty"`
}

// RuntimeDirective tells the node's agent what it may do with one runtime ID.
type RuntimeDirective struct {
	// +kubebuilder:validation:MaxLength=55
	ID string `json:"id"`
	// +kubebuilder:validation:Enum=Eager;OnDemand
	Install string `json:"install"`
	// AllowedGeneration is the newest generation this node's rollout wave may install;
	// zero means the RuntimeImage's current generation.
	// +optional
	AllowedGeneration int64 `json:"allowedGeneration,omitempty"`
	// InstallBy is when the node's wave allowed allowedGeneration plus the profile's
	// rollout.nodeTimeout, on the operator's clock: a node neither serving nor failing the
	// generation by then is excluded from the rotation. The agent does not read it.
	// +optional
	InstallBy *metav1.Time `json:"installBy,omitempty"`
	// Quarantine withdraws the ID on this node (labels, authorization) without cleanup.
	// +optional
	Quarantine bool `json:"quarantine,omitempty"`
	// +optional
	QuarantineReason string `json:"quarantineReason,omitempty"`
}

// NodeRuntimeStatus is written only by the agent on the node it describes.
type NodeRuntimeStatus struct {
	// +optional
	NodeUID types.UID `json:"nodeUID,omitempty"`
	// +optional
	AgentPodUID types.UID `json:"agentPodUID,omitempty"`
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`
	// Complete is true when the agent saw every live task and lease on the node.
	// +optional
	Complete bool `json:"complete"`
	// +optional
	// +listType=map
	// +listMapKey=id
	Runtimes []NodeRuntimeEntry `json:"runtimes,omitempty"`
	// +optional
	// +listType=atomic
	Tasks []NodeTask `json:"tasks,omitempty"`
	// FailedStarts are containers of Brewlet runtimes that exited with an error within a
	// minute of their start, unasked, in the last 15 minutes: newest first, at most 16.
	// The operator counts them against a rotation's target generation
	// (status.rotation.failedStarts of the RuntimeImage).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	FailedStarts []NodeFailedStart `json:"failedStarts,omitempty"`
	// +optional
	Cleanup *NodeCleanup `json:"cleanup,omitempty"`
}

// NodeFailedStart is one container that failed to start, with the generation it leased.
type NodeFailedStart struct {
	// +kubebuilder:validation:MaxLength=253
	PodNamespace string `json:"podNamespace"`
	// +kubebuilder:validation:MaxLength=253
	PodName string    `json:"podName"`
	PodUID  types.UID `json:"podUID"`
	// +kubebuilder:validation:MaxLength=253
	ContainerName string `json:"containerName"`
	// +kubebuilder:validation:MaxLength=253
	ID    string    `json:"id"`
	Epoch types.UID `json:"epoch"`
	// +kubebuilder:validation:Minimum=1
	Generation int64       `json:"generation"`
	ExitCode   int32       `json:"exitCode"`
	ExitedAt   metav1.Time `json:"exitedAt"`
}

// NodeRuntimeEntry is the state of one runtime ID on the node.
type NodeRuntimeEntry struct {
	ID string `json:"id"`
	// +optional
	Epoch types.UID `json:"epoch,omitempty"`
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// +optional
	Digest string `json:"digest,omitempty"`
	// +kubebuilder:validation:Enum=Installing;Ready;Failed;Available;Revoked
	State string `json:"state"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	AuthorizedUntil *metav1.Time `json:"authorizedUntil,omitempty"`
	// FailedGeneration is the generation of this epoch the node tried and could not
	// install (refused by the runtime rules, or a pull that failed), with the cause in
	// reason and message. The node keeps serving `generation`; a rollout counts the node
	// against its failure budget for that generation.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailedGeneration int64 `json:"failedGeneration,omitempty"`
}

// NodeTask is one running container and the generation it leased.
type NodeTask struct {
	PodNamespace  string    `json:"podNamespace"`
	PodName       string    `json:"podName"`
	PodUID        types.UID `json:"podUID"`
	ContainerName string    `json:"containerName"`
	ID            string    `json:"id"`
	Epoch         types.UID `json:"epoch"`
	Generation    int64     `json:"generation"`
}

// NodeCleanup records host changes Brewlet made on the node and which were reversed.
type NodeCleanup struct {
	// +optional
	ShimInstalled bool `json:"shimInstalled,omitempty"`
	// +optional
	ContainerdHandlerRegistered bool `json:"containerdHandlerRegistered,omitempty"`
	// +optional
	// +listType=set
	InstalledRuntimes []string `json:"installedRuntimes,omitempty"`
	// +optional
	Done bool `json:"done,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// NodeRuntime is the per-node shadow: spec from the operator, status from the node's agent.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nrt,categories=brewlet
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Complete",type=boolean,JSONPath=`.status.complete`
// +kubebuilder:printcolumn:name="Runtimes",type=string,JSONPath=`.status.runtimes[*].id`
// +kubebuilder:printcolumn:name="States",type=string,JSONPath=`.status.runtimes[*].state`
// +kubebuilder:printcolumn:name="Generations",type=string,JSONPath=`.status.runtimes[*].generation`
// +kubebuilder:printcolumn:name="Allowed",type=string,JSONPath=`.spec.runtimes[*].allowedGeneration`,priority=1
// +kubebuilder:printcolumn:name="Observed",type=date,JSONPath=`.status.observedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec NodeRuntimeSpec `json:"spec,omitempty"`
	// +optional
	Status NodeRuntimeStatus `json:"status,omitempty"`
}

// NodeRuntimeList is a list of NodeRuntimes.
//
// +kubebuilder:object:root=true
type NodeRuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeRuntime `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &NodeRuntime{}, &NodeRuntimeList{})
}
