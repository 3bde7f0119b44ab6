package nodepool

import (
	"reflect"
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
	withCP := func(p brewletv1.NodeProfile) brewletv1.NodeProfile {
		p.Spec.NodePool.IncludeControlPlane = true
		return p
	}
	deleting := offer(profile("gone", 0, poolKey, "general"), "python-3.12")
	deleting.DeletionTimestamp = &metav1.Time{}
	const team = "node-restriction.kubernetes.io/team"
	in := func(k string, v ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: v}
	}
	notIn := func(k string, v ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpNotIn, Values: v}
	}
	noCP := corev1.NodeSelectorRequirement{Key: ControlPlaneLabel, Operator: corev1.NodeSelectorOpDoesNotExist}
	profiles := []brewletv1.NodeProfile{
		offer(profile("a", 1, poolKey, "general", "batch", "general"), "python-3.12", "node-20"),
		offer(withCP(profile("b", 2, team, "ml")), "python-3.12"),
		offer(profile("c", 3, poolKey, "general", "gpu"), "ruby-3"), // newer, overlapping a on general
		offer(profile("d", 4, poolKey, "edge"), "ruby-3"),           // disjoint from every older one of its key
		offer(profile("forged", 5, "pool.example/name", "general"), "python-3.12", "ruby-3"),
		offer(profile("bad", 6, poolKey, "", "has space", "-lead"), "python-3.12"),
		deleting,
	}
	for _, tc := range []struct {
		id   string
		want [][]corev1.NodeSelectorRequirement
	}{
		{"python-3.12", [][]corev1.NodeSelectorRequirement{
			{in(poolKey, "batch", "general"), noCP},
			{in(team, "ml"), notIn(poolKey, "batch", "general")},
		}},
		// A node of pool general belongs to a (older): ruby-3 of c may go to gpu nodes only.
		{"ruby-3", [][]corev1.NodeSelectorRequirement{
			{in(poolKey, "general", "gpu"), notIn(poolKey, "batch", "general"), notIn(team, "ml"), noCP},
			{in(poolKey, "edge"), notIn(team, "ml"), noCP},
		}},
		{"jre-17", nil},
	} {
		got := Offering(profiles, tc.id)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Offering(%s)\n got %v\nwant %v", tc.id, got, tc.want)
		}
	}
}
