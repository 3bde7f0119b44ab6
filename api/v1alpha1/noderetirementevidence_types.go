package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeRetirementEvidenceSpec attests that one specific host was permanently destroyed.
// It is immutable once created.
type NodeRetirementEvidenceSpec struct {
	// NodeName is the original Node name recorded in a NodeProfile ledger.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
	// NodeUID is the original Node UID recorded in the ledger.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	NodeUID string `json:"nodeUID"`
	// ProviderID is the Node's spec.providerID.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ProviderID string `json:"providerID,omitempty"`
	// InstanceID is the provider's non-reusable instance identifier.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	InstanceID string `json:"instanceID"`
	// RetiredAt is when the host was destroyed; it cannot be in the future.
	RetiredAt metav1.Time `json:"retiredAt"`
	// EvidenceRef points at external evidence (a ticket, an audit log entry).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	EvidenceRef string `json:"evidenceRef"`
}

// Phases of NodeRetirementEvidence.
const (
	EvidenceBlocked  = "Blocked"  // does not match the ledger, retiredAt in the future, or the node still exists
	EvidenceAccepted = "Accepted" // matches a pending ledger entry of a node that no longer exists
	EvidenceResolved = "Resolved" // no ledger lists the node any more
)

// NodeRetirementEvidenceStatus is written by the operator.
type NodeRetirementEvidenceStatus struct {
	// +optional
	// +kubebuilder:validation:Enum=Blocked;Accepted;Resolved
	Phase string `json:"phase,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// NodeRetirementEvidence is an administrator's immutable record that a host no longer
// exists, so the cleanup it owes can never run. Accepted evidence resolves the obligation;
// it never claims the cleanup ran.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nre,categories=brewlet
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Retired",type=date,JSONPath=`.spec.retiredAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="NodeRetirementEvidence is immutable: delete it and create a new record to correct it"
type NodeRetirementEvidence struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec NodeRetirementEvidenceSpec `json:"spec"`
	// +optional
	Status NodeRetirementEvidenceStatus `json:"status,omitempty"`
}

// NodeRetirementEvidenceList is a list of NodeRetirementEvidences.
//
// +kubebuilder:object:root=true
type NodeRetirementEvidenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeRetirementEvidence `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &NodeRetirementEvidence{}, &NodeRetirementEvidenceList{})
}
