package v1alpha1

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/types"
)

// RotationBarrier is the value of the pod-template annotation
// brewlet.sh/rotated-to-generation, which brewlet-operator sets to restart a workload after
// a rotation: its pods start on generation Generation of RuntimeImage ID (epoch Epoch) or
// newer. Anyone can write a pod-template annotation: it is compared, never trusted.
// +kubebuilder:object:generate=false
type RotationBarrier struct {
	ID         string    `json:"id"`
	Epoch      types.UID `json:"epoch"`
	Generation int64     `json:"generation"`
}

// String is the annotation's value.
func (b RotationBarrier) String() string {
	out, _ := json.Marshal(b)
	return string(out)
}

// ParseRotationBarrier reads an annotation value; ok is false when it is absent or
// unreadable.
func ParseRotationBarrier(v string) (RotationBarrier, bool) {
	var b RotationBarrier
	if v == "" || json.Unmarshal([]byte(v), &b) != nil || b.ID == "" {
		return RotationBarrier{}, false
	}
	return b, true
}
