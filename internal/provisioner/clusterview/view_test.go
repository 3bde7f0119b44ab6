package clusterview

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

func TestSameVersions(t *testing.T) {
	obj := func(name, rv string) client.Object {
		return &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	for _, c := range []struct {
		name   string
		server map[string]string
		cached []client.Object
		want   bool
	}{
		{"both empty", map[string]string{}, nil, true},
		{"equal", map[string]string{"a": "5", "b": "7"}, []client.Object{obj("b", "7"), obj("a", "5")}, true},
		{"cache behind", map[string]string{"a": "6"}, []client.Object{obj("a", "5")}, false},
		{"cache misses an object", map[string]string{"a": "5", "b": "7"}, []client.Object{obj("a", "5")}, false},
		{"cache keeps a deleted object", map[string]string{"a": "5"}, []client.Object{obj("a", "5"), obj("b", "7")}, false},
		{"same count, other name", map[string]string{"a": "5"}, []client.Object{obj("c", "5")}, false},
	} {
		if got := sameVersions(c.server, c.cached); got != c.want {
			t.Errorf("%s: sameVersions = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestStripForAgent(t *testing.T) {
	ri := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "py", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}}}
	ri.Status.Generation, ri.Status.Digest = 3, "sha256:abc"
	ri.Status.Rotation = &brewletv1.RotationStatus{}
	ri.Status.TaskObservations = []brewletv1.TaskObservation{{NodeName: "n"}}
	out, err := stripForAgent(ri)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*brewletv1.RuntimeImage)
	if got.ManagedFields != nil || got.Status.Rotation != nil || got.Status.TaskObservations != nil {
		t.Fatalf("not stripped: %+v", got)
	}
	if got.Status.Generation != 3 || got.Status.Digest != "sha256:abc" {
		t.Fatalf("stripped what authorizations read: %+v", got.Status)
	}
}

func TestViewCollectors(t *testing.T) {
	v := &View{}
	v.Confirmed.Add(3)
	v.Fallbacks.Add(1)
	reg := prometheus.NewRegistry()
	reg.MustRegister(v.Collectors()...)
	want := `# HELP brewlet_provisioner_cluster_reads_total Agent passes by how they read NodeProfiles and RuntimeImages (confirmed informers, or full lists).
# TYPE brewlet_provisioner_cluster_reads_total counter
brewlet_provisioner_cluster_reads_total{outcome="confirmed"} 3
brewlet_provisioner_cluster_reads_total{outcome="fallback"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "brewlet_provisioner_cluster_reads_total"); err != nil {
		t.Fatal(err)
	}
}
