package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// NodeProfileSpec chooses which node pools offer which runtimes.
type NodeProfileSpec struct {
	NodePool NodePool `json:"nodePool"`

	// RuntimeImages lists the runtime IDs this pool offers.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=64
	RuntimeImages []OfferedRuntime `json:"runtimeImages,omitempty"`

	// ContainerdRestart says whether the provisioner registers the brewlet handler in
	// containerd's config (validated, restarted, health-checked, rolled back on failure) or
	// leaves containerd alone because the node image already has the handler (none).
	// +optional
	// +kubebuilder:default=validated
	// +kubebuilder:validation:Enum=validated;none
	ContainerdRestart string `json:"containerdRestart,omitempty"`

	// +optional
	Rollout *RolloutPolicy `json:"rollout,omitempty"`
}

// NodePool selects nodes by the value of one label. A profile never selects every node.
type NodePool struct {
	// Key is the node label key whose value names the pool. It must be one no node can set
	// on itself: under node-restriction.kubernetes.io/ (which the NodeRestriction admission
	// plugin forbids kubelets to write on their own Node), and not one of Brewlet's own keys
	// there (node-restriction.kubernetes.io/brewlet*), which the node's agent writes.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.startsWith('node-restriction.kubernetes.io/') && self.substring(size('node-restriction.kubernetes.io/')).matches('^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && !self.startsWith('node-restriction.kubernetes.io/brewlet')",message="nodePool.key must be a label key under node-restriction.kubernetes.io/ (not node-restriction.kubernetes.io/brewlet*): a node's own kubelet can set any other key on its Node and so join the pool"
	Key string `json:"key"`
	// Names are the pool names (label values) this profile applies to.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	// +listType=set
	Names []string `json:"names"`
	// IncludeControlPlane lets the profile select control-plane nodes.
	// +optional
	IncludeControlPlane bool `json:"includeControlPlane,omitempty"`
}

// OfferedRuntime is one runtime ID offered by a pool.
type OfferedRuntime struct {
	// ID is a RuntimeImage name.
	// +kubebuilder:validation:MaxLength=55
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="id must be a runtime ID (a RuntimeImage name)"
	ID string `json:"id"`
	// Install is Eager (at once on every node of the pool) or OnDemand (on the first
	// container that asks for it).
	// +optional
	// +kubebuilder:default=Eager
	// +kubebuilder:validation:Enum=Eager;OnDemand
	Install string `json:"install,omitempty"`
	// (Removing an OnDemand runtime after an idle period is planned; until it exists the
	// API has no field for it, so a manifest asking for it is refused as unknown.)
}

// RolloutPolicy limits how many nodes install a new generation at once.
type RolloutPolicy struct {
	// MaxUnavailable is a count or a percentage of the pool; default: all nodes at once.
	// +optional
	// +kubebuilder:validation:XIntOrString
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// MaxFailures is how many nodes may fail a generation before its rotation halts
	// (no further node is allowed it; only a new digest resumes); default 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxFailures *int32 `json:"maxFailures,omitempty"`
	// NodeTimeout is how long a node allowed a new generation may take to serve it or to
	// report a failure; a node past it is excluded from the rotation (NodeTimedOut), frees
	// its wave slot and does not count against maxFailures. It keeps its allowance and
	// rejoins when it reports the generation. Default 10m.
	// +optional
	NodeTimeout *metav1.Duration `json:"nodeTimeout,omitempty"`
}

// NodeProfileStatus is written by the operator.
type NodeProfileStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	AssignedNodes int32 `json:"assignedNodes"`
	// +optional
	ReadyNodes int32 `json:"readyNodes"`
	// NodesWithoutAgent lists assigned nodes whose agent is not running and reporting
	// (its heartbeat is stale or was never seen), with what the cluster says about its pod;
	// at most 20, sorted by name, the exact number in NodesWithoutAgentCount.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	NodesWithoutAgent []NodeAgentProblem `json:"nodesWithoutAgent,omitempty"`
	// +optional
	NodesWithoutAgentCount int32 `json:"nodesWithoutAgentCount,omitempty"`
	// Ledger records every node (name and UID) this profile ever changed and the cleanup
	// it still owes. Entries leave only when the cleanup ran or retirement evidence was
	// accepted.
	// +optional
	// +listType=atomic
	Ledger []LedgerEntry `json:"ledger,omitempty"`
}

// NodeAgentProblem is an assigned node whose agent does not run and report.
type NodeAgentProblem struct {
	NodeName string `json:"nodeName"`
	// Reason is AgentPodMissing, AgentPodPending, AgentContainerFailing or AgentNotReporting.
	Reason string `json:"reason"`
	// Message says what the cluster knows (the pod's state, the container's waiting reason
	// and message, restarts, the last heartbeat) and, where it is known, what to change.
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
	// Since is the agent's last heartbeat, or when its pod was created if it never beat.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// LedgerEntry is one node this profile changed.
type LedgerEntry struct {
	NodeName string    `json:"nodeName"`
	NodeUID  types.UID `json:"nodeUID"`
	// RuntimeImages are the IDs whose removal the node still owes.
	// +optional
	// +listType=set
	RuntimeImages []string `json:"runtimeImages,omitempty"`
	// ContainerdConfig is true while the node's containerd handler change is not reversed.
	// +optional
	ContainerdConfig bool `json:"containerdConfig,omitempty"`
	// Owed is true while cleanup is due (the node left the pool, or the profile is going).
	// +optional
	Owed bool `json:"owed,omitempty"`
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// NodeProfile chooses which node pools offer which runtime IDs.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=np,categories=brewlet
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Pool-Key",type=string,JSONPath=`.spec.nodePool.key`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Assigned",type=integer,JSONPath=`.status.assignedNodes`
// +kubebuilder:printcolumn:name="Ready-Nodes",type=integer,JSONPath=`.status.readyNodes`
// +kubebuilder:printcolumn:name="Cleanup",type=string,JSONPath=`.status.conditions[?(@.type=="CleanupComplete")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec NodeProfileSpec `json:"spec"`
	// +optional
	Status NodeProfileStatus `json:"status,omitempty"`
}

// NodeProfileList is a list of NodeProfiles.
//
// +kubebuilder:object:root=true
type NodeProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeProfile `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &NodeProfile{}, &NodeProfileList{})
}
