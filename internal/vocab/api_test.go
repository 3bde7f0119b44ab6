package vocab

import (
	"testing"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

// The API package names its group and version itself (it imports nothing of the
// project's internals); the vocabulary every component speaks must say the same.
func TestAPIGroupVersionAgrees(t *testing.T) {
	if brewletv1.Group != Group || brewletv1.Version != Version {
		t.Fatalf("api/v1alpha1 is %s/%s, the vocabulary %s/%s", brewletv1.Group, brewletv1.Version, Group, Version)
	}
	if gv := brewletv1.GroupVersion; gv.Group != Group || gv.Version != Version {
		t.Fatalf("GroupVersion %v", gv)
	}
}
