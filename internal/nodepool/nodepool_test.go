package nodepool

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

const poolKey = "node-restriction.kubernetes.io/pool"

func profile(name string, age int64, key string, names ...string) brewletv1.NodeProfile {
	return brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Unix(age, 0)},
		Spec: brewletv1.NodeProfileSpec{NodePool: brewletv1.NodePool{Key: key, Names: names}}}
}

func TestSelect(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{poolKey: "general"}}}
	owner, refused := Select(n, []brewletv1.NodeProfile{profile("c", 3, poolKey, "general"), profile("a", 2, poolKey, "general"),
		profile("b", 2, poolKey, "general"), profile("x", 1, poolKey, "gpu")})
	if owner == nil || owner.Name != "a" || len(refused) != 2 {
		t.Fatalf("owner %v refused %d: want the oldest (a, tie broken by name) and two refused", owner, len(refused))
	}
	if owner, refused := Select(n, nil); owner != nil || refused != nil {
		t.Fatal("no profiles, no owner")
	}
}

// A pool key a kubelet can set on its own Node (anything outside node-restriction.
// kubernetes.io/) or one of Brewlet's own keys selects nothing, even where the node
// carries it: a profile stored before the rule was in the CRD is not served.
func TestKeyTrusted(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{poolKey, true},
		{"node-restriction.kubernetes.io/team.pool", true},
		{"pool", false},
		{"pool.example/name", false},
		{"node.kubernetes.io/instance-type", false},
		{"node-restriction.kubernetes.io/", false},
		{"node-restriction.kubernetes.io/brewlet", false},
		{"node-restriction.kubernetes.io/brewlet.python-3.12", false},
		{"node-restriction.kubernetes.io/brewlet-host-changes", false},
		{"node-restriction.kubernetes.iox/pool", false},
		{"x.node-restriction.kubernetes.io/pool", false},
	} {
		if got := KeyTrusted(tc.key); got != tc.want {
			t.Errorf("KeyTrusted(%q) = %v, want %v", tc.key, got, tc.want)
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{tc.key: "general"}}}
		p := profile("p", 1, tc.key, "general")
		if got := Matches(&p, n); got != tc.want {
			t.Errorf("a profile with pool key %q matches its node: %v, want %v", tc.key, got, tc.want)
		}
	}
}

func TestOffering(t *testing.T) {
	offer := func(p brewletv1.NodeProfile, ids ...string) brewletv1.NodeProfile {
		for _, id := range ids {
			p.Spec.RuntimeImages = append(p.Spec.RuntimeImages, brewletv1.OfferedRuntime{ID: id})
		}
		return p
	}
	deleting := offer(profile("gone", 1, poolKey, "old"), "python-3.12")
	deleting.DeletionTimestamp = &metav1.Time{}
	profiles := []brewletv1.NodeProfile{
		offer(profile("a", 1, poolKey, "general", "batch"), "python-3.12", "node-20"),
		offer(profile("b", 2, "node-restriction.kubernetes.io/team", "ml"), "python-3.12"),
		offer(profile("c", 3, poolKey, "general"), "python-3.12"), // a newer overlapping profile
		offer(profile("d", 4, poolKey, "gpu"), "ruby-3"),
		offer(profile("forged", 5, "pool.example/name", "general"), "python-3.12"),
		deleting,
	}
	for _, tc := range []struct {
		id   string
		want map[string][]string
	}{
		{"python-3.12", map[string][]string{poolKey: {"batch", "general"}, "node-restriction.kubernetes.io/team": {"ml"}}},
		{"ruby-3", map[string][]string{poolKey: {"gpu"}}},
		{"jre-17", map[string][]string{}},
	} {
		got := Offering(profiles, tc.id)
		if len(got) != len(tc.want) {
			t.Errorf("Offering(%s) = %v, want %v", tc.id, got, tc.want)
			continue
		}
		for k, v := range tc.want {
			if !slices.Equal(got[k], v) {
				t.Errorf("Offering(%s)[%s] = %v, want %v", tc.id, k, got[k], v)
			}
		}
	}
}
