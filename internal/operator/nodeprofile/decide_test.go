package nodeprofile

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/nodepool"
	"brewlet.sh/brewlet/internal/operator/rollout"
	"brewlet.sh/brewlet/internal/vocab"
)

var now = metav1.Unix(1000, 0)

func prof(name string, age int64, pools []string, ids ...string) brewletv1.NodeProfile {
	p := brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, CreationTimestamp: metav1.Unix(age, 0)},
		Spec: brewletv1.NodeProfileSpec{NodePool: brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: pools}}}
	for _, id := range ids {
		p.Spec.RuntimeImages = append(p.Spec.RuntimeImages, brewletv1.OfferedRuntime{ID: id, Install: "Eager"})
	}
	return p
}

func node(name, pool string, extra ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"node-restriction.kubernetes.io/pool": pool}}}
	for _, k := range extra {
		n.Labels[k] = ""
	}
	return n
}

// forgeable moves the profile's pool to a key outside node-restriction.kubernetes.io/.
func forgeable(p brewletv1.NodeProfile) brewletv1.NodeProfile {
	p.Spec.NodePool.Key = "pool.example/name"
	return p
}

// kubeletLabelled is a node that gave itself the forgeable pool key.
func kubeletLabelled(name, pool string) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"pool.example/name": pool}}}
}

func img(name string, gen int64) *brewletv1.RuntimeImage {
	return &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("e-" + name)},
		Status: brewletv1.RuntimeImageStatus{Epoch: types.UID("e-" + name), Generation: gen, Digest: "sha256:x"}}
}

func nrt(name string, entries ...brewletv1.NodeRuntimeEntry) *brewletv1.NodeRuntime {
	return &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: brewletv1.NodeRuntimeStatus{Runtimes: entries}}
}

func ready(id string, gen int64) brewletv1.NodeRuntimeEntry {
	return brewletv1.NodeRuntimeEntry{ID: id, Epoch: types.UID("e-" + id), Generation: gen, State: "Ready"}
}

func input(p brewletv1.NodeProfile, others []brewletv1.NodeProfile, nodes []corev1.Node, images []*brewletv1.RuntimeImage, rts ...*brewletv1.NodeRuntime) Input {
	in := Input{Profile: &p, Profiles: append([]brewletv1.NodeProfile{p}, others...), Nodes: nodes,
		Images: map[string]*brewletv1.RuntimeImage{}, Runtimes: map[string]*brewletv1.NodeRuntime{}, Now: now}
	for _, i := range images {
		in.Images[i.Name] = i
	}
	for _, r := range rts {
		in.Runtimes[r.Name] = r
	}
	return in
}

func TestDecide(t *testing.T) {
	general := []string{"general"}
	three := []corev1.Node{node("a", "general"), node("b", "general"), node("c", "batch")}
	for _, tc := range []struct {
		name     string
		in       Input
		assigned []string
		ready    int32
		reason   vocab.Reason
		msg      []string // substrings of the Ready message
	}{
		{"pool selection: key and names, other pools left alone",
			input(prof("p", 1, general, "py"), nil, three, []*brewletv1.RuntimeImage{img("py", 1)}),
			[]string{"a", "b"}, 0, vocab.ReasonNodesNotReady, []string{"0 of 2"}},
		{"control-plane nodes only when asked",
			input(prof("p", 1, general, "py"), nil, []corev1.Node{node("cp", "general", nodepool.ControlPlaneLabel), node("a", "general")}, []*brewletv1.RuntimeImage{img("py", 1)}),
			[]string{"a"}, 0, vocab.ReasonNodesNotReady, nil},
		{"ready nodes report every Eager ID Ready",
			input(prof("p", 1, general, "py"), nil, three, []*brewletv1.RuntimeImage{img("py", 1)}, nrt("a", ready("py", 1)), nrt("b")),
			[]string{"a", "b"}, 1, vocab.ReasonNodesNotReady, []string{"1 of 2"}},
		{"all ready",
			input(prof("p", 1, general, "py"), nil, three, []*brewletv1.RuntimeImage{img("py", 1)}, nrt("a", ready("py", 1)), nrt("b", ready("py", 1))),
			[]string{"a", "b"}, 2, vocab.ReasonNodesReady, []string{"2 of 2"}},
		{"the newer of two overlapping profiles is refused on the shared nodes",
			input(prof("new", 5, []string{"general", "batch"}, "py"), []brewletv1.NodeProfile{prof("old", 1, general, "py")}, three, []*brewletv1.RuntimeImage{img("py", 1)}),
			[]string{"c"}, 0, vocab.ReasonPoolConflict, []string{"NodeProfile old (older) already serves node(s) a, b"}},
		{"the older keeps serving",
			input(prof("old", 1, general, "py"), []brewletv1.NodeProfile{prof("new", 5, []string{"general", "batch"}, "py")}, three, []*brewletv1.RuntimeImage{img("py", 1)}, nrt("a", ready("py", 1)), nrt("b", ready("py", 1))),
			[]string{"a", "b"}, 2, vocab.ReasonNodesReady, nil},
		{"an unknown ID makes the profile not Ready, the nodes still get the others",
			input(prof("p", 1, general, "py", "ghost"), nil, three, []*brewletv1.RuntimeImage{img("py", 1)}, nrt("a", ready("py", 1)), nrt("b", ready("py", 1))),
			[]string{"a", "b"}, 2, vocab.ReasonUnknownRuntimeImage, []string{"ghost"}},
		{"a pool key a kubelet could set serves no node, though the nodes carry it",
			input(forgeable(prof("p", 1, general, "py")), nil, []corev1.Node{kubeletLabelled("a", "general")}, []*brewletv1.RuntimeImage{img("py", 1)}, nrt("a", ready("py", 1))),
			nil, 0, vocab.ReasonPoolKeyForgeable, []string{`"pool.example/name"`, "node-restriction.kubernetes.io/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			if !slices.Equal(d.Assigned, tc.assigned) {
				t.Fatalf("assigned %v, want %v", d.Assigned, tc.assigned)
			}
			if d.Status.AssignedNodes != int32(len(tc.assigned)) || d.Status.ReadyNodes != tc.ready {
				t.Fatalf("status assigned %d ready %d, want %d %d", d.Status.AssignedNodes, d.Status.ReadyNodes, len(tc.assigned), tc.ready)
			}
			c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionReady))
			if c == nil || c.Reason != string(tc.reason) || (c.Status == metav1.ConditionTrue) != (tc.reason == vocab.ReasonNodesReady) {
				t.Fatalf("Ready %+v, want reason %s", c, tc.reason)
			}
			for _, m := range tc.msg {
				if !strings.Contains(c.Message, m) {
					t.Fatalf("Ready message %q lacks %q", c.Message, m)
				}
			}
			if len(d.Specs) != len(tc.assigned) {
				t.Fatalf("specs for %d nodes, want %d", len(d.Specs), len(tc.assigned))
			}
			for _, n := range tc.assigned {
				if got := len(d.Specs[n].Runtimes); got != len(tc.in.Profile.Spec.RuntimeImages) {
					t.Fatalf("node %s: %d directives, want one per offered ID", n, got)
				}
			}
			// A first decision is an event; deciding again over the stored status is not.
			if len(d.Events) != 1 || d.Events[0].Reason != tc.reason {
				t.Fatalf("events %+v", d.Events)
			}
			again := tc.in
			p := tc.in.Profile.DeepCopy()
			p.Status = d.Status
			again.Profile = p
			again.Now = metav1.Unix(2000, 0)
			d2 := Decide(again)
			if len(d2.Events) != 0 || !equality.Semantic.DeepEqual(d2.Status, d.Status) {
				t.Fatalf("not idempotent: events %+v, status %+v then %+v", d2.Events, d.Status, d2.Status)
			}
		})
	}
}

func TestSpecs(t *testing.T) {
	p := prof("p", 1, []string{"general"}, "py", "node")
	p.Spec.RuntimeImages[1].Install = "OnDemand"
	one := intstr.FromInt32(1)
	p.Spec.Rollout = &brewletv1.RolloutPolicy{MaxUnavailable: &one}
	quarantined := nrt("b", ready("py", 1))
	quarantined.Spec.Runtimes = []brewletv1.RuntimeDirective{{ID: "py", Install: "Eager", AllowedGeneration: 1, Quarantine: true, QuarantineReason: "stalled"}}
	in := input(p, nil, []corev1.Node{node("a", "general"), node("b", "general")}, []*brewletv1.RuntimeImage{img("py", 2), img("node", 1)},
		nrt("a", ready("py", 1)), quarantined)
	d := Decide(in)
	// A node let through gets its deadline (installBy); one held by the wave gets none.
	by := &metav1.Time{Time: now.Add(rollout.DefaultNodeTimeout)}
	want := map[string]brewletv1.NodeRuntimeSpec{
		"a": {ContainerdRestart: "validated", Runtimes: []brewletv1.RuntimeDirective{
			{ID: "py", Install: "Eager", AllowedGeneration: 2, InstallBy: by}, {ID: "node", Install: "OnDemand", AllowedGeneration: 1, InstallBy: by}}},
		"b": {ContainerdRestart: "validated", Runtimes: []brewletv1.RuntimeDirective{
			{ID: "py", Install: "Eager", AllowedGeneration: 1, Quarantine: true, QuarantineReason: "stalled"}, {ID: "node", Install: "OnDemand", AllowedGeneration: 1, InstallBy: by}}},
	}
	for n, w := range want {
		if !SpecEqual(d.Specs[n], w) {
			t.Fatalf("node %s spec %+v, want %+v", n, d.Specs[n], w)
		}
	}
	p.Spec.ContainerdRestart = "none"
	in = input(p, nil, []corev1.Node{node("a", "general")}, nil)
	if got := Decide(in).Specs["a"]; got.ContainerdRestart != "none" || got.Runtimes[0].AllowedGeneration != 0 {
		t.Fatalf("spec %+v: want containerdRestart none, no allowance for unknown IDs", got)
	}
}

func TestDeletingProfileServesNothing(t *testing.T) {
	p := prof("p", 1, []string{"general"}, "py")
	p.DeletionTimestamp = &now
	d := Decide(input(p, nil, []corev1.Node{node("a", "general")}, []*brewletv1.RuntimeImage{img("py", 1)}))
	if len(d.Assigned) != 0 || len(d.Specs) != 0 {
		t.Fatalf("a profile being deleted assigned %v", d.Assigned)
	}
}
