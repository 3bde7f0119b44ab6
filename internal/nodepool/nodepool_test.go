package nodepool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

func TestSelect(t *testing.T) {
	p := func(name string, age int64, names ...string) brewletv1.NodeProfile {
		return brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Unix(age, 0)},
			Spec: brewletv1.NodeProfileSpec{NodePool: brewletv1.NodePool{Key: "pool", Names: names}}}
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"pool": "general"}}}
	owner, refused := Select(n, []brewletv1.NodeProfile{p("c", 3, "general"), p("a", 2, "general"), p("b", 2, "general"), p("x", 1, "gpu")})
	if owner == nil || owner.Name != "a" || len(refused) != 2 {
		t.Fatalf("owner %v refused %d: want the oldest (a, tie broken by name) and two refused", owner, len(refused))
	}
	if owner, refused := Select(n, nil); owner != nil || refused != nil {
		t.Fatal("no profiles, no owner")
	}
}
