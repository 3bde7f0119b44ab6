package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/provisioner/writer"
	"brewlet.sh/brewlet/internal/vocab"
)

func profile(name string, names ...string) brewletv1.NodeProfile {
	return brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: brewletv1.NodeProfileSpec{
		NodePool: brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: names}, RuntimeImages: []brewletv1.OfferedRuntime{{ID: "py", Install: "Eager"}}}}
}

func aged(p brewletv1.NodeProfile, sec int64) brewletv1.NodeProfile {
	p.CreationTimestamp = metav1.Unix(sec, 0)
	return p
}

func deleting(p brewletv1.NodeProfile) brewletv1.NodeProfile {
	now := metav1.Unix(100, 0)
	p.DeletionTimestamp = &now
	return p
}

func TestSelectProfile(t *testing.T) {
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels}}
	}
	cpProfile := profile("cp", "general")
	cpProfile.Spec.NodePool.IncludeControlPlane = true
	for _, tc := range []struct {
		name     string
		node     *corev1.Node
		profiles []brewletv1.NodeProfile
		want     string
		reason   vocab.Reason
	}{
		{"match", node(map[string]string{"node-restriction.kubernetes.io/pool": "general"}), []brewletv1.NodeProfile{profile("a", "general"), profile("b", "gpu")}, "a", ""},
		{"no label", node(nil), []brewletv1.NodeProfile{profile("a", "general")}, "", ""},
		{"other pool", node(map[string]string{"node-restriction.kubernetes.io/pool": "batch"}), []brewletv1.NodeProfile{profile("a", "general")}, "", ""},
		{"overlap: the older profile keeps the node", node(map[string]string{"node-restriction.kubernetes.io/pool": "general"}), []brewletv1.NodeProfile{aged(profile("b", "general", "gpu"), 2), aged(profile("a", "general"), 1)}, "a", vocab.ReasonPoolConflict},
		{"overlap: same age, the name decides", node(map[string]string{"node-restriction.kubernetes.io/pool": "general"}), []brewletv1.NodeProfile{profile("b", "general"), profile("a", "general", "gpu")}, "a", vocab.ReasonPoolConflict},
		{"overlap: a deleted profile does not conflict", node(map[string]string{"node-restriction.kubernetes.io/pool": "general"}), []brewletv1.NodeProfile{deleting(aged(profile("a", "general"), 1)), aged(profile("b", "general"), 2)}, "b", ""},
		{"control plane skipped", node(map[string]string{"node-restriction.kubernetes.io/pool": "general", controlPlaneLabel: ""}), []brewletv1.NodeProfile{profile("a", "general")}, "", ""},
		{"control plane opted in", node(map[string]string{"node-restriction.kubernetes.io/pool": "general", controlPlaneLabel: ""}), []brewletv1.NodeProfile{cpProfile}, "cp", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := SelectProfile(tc.node, tc.profiles)
			if vocab.ReasonOf(err) != tc.reason {
				t.Fatalf("err %v, want reason %q", err, tc.reason)
			}
			got := ""
			if p != nil {
				got = p.Name
			}
			if got != tc.want {
				t.Fatalf("profile %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTargets(t *testing.T) {
	const dg = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	ri := func(mut func(*brewletv1.RuntimeImage)) map[string]*brewletv1.RuntimeImage {
		r := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "py", UID: "u1"},
			Spec: brewletv1.RuntimeImageSpec{Source: brewletv1.RuntimeImageSource{Image: "reg/rt/py@" + dg}, User: brewletv1.RuntimeUser{UID: 10, GID: 11}},
			Status: brewletv1.RuntimeImageStatus{Epoch: "u1", Generation: 3, Digest: dg,
				Conditions: []metav1.Condition{{Type: "Approved", Status: metav1.ConditionTrue}}}}
		if mut != nil {
			mut(r)
		}
		return map[string]*brewletv1.RuntimeImage{"py": r}
	}
	p := profile("a", "general")
	for _, tc := range []struct {
		name    string
		profile *brewletv1.NodeProfile
		images  map[string]*brewletv1.RuntimeImage
		spec    brewletv1.NodeRuntimeSpec
		held    []string
		revoke  bool
		reason  vocab.Reason
		gen     int64
		image   string
	}{
		{"install as the directive allows", &p, ri(nil), brewletv1.NodeRuntimeSpec{Runtimes: []brewletv1.RuntimeDirective{{ID: "py", AllowedGeneration: 3}}}, nil, false, "", 3, "reg/rt/py@" + dg},
		// Without a directive (a new node, the operator down) a generation the fleet has not
		// finished may be paused, halted or in waves: nothing newer is installed...
		{"no directive, rotation unfinished", &p, ri(nil), brewletv1.NodeRuntimeSpec{}, nil, false, "", 3, ""},
		{"no directive, the recorded rotation is another generation's", &p, ri(func(r *brewletv1.RuntimeImage) {
			done := metav1.Now()
			r.Status.Rotation = &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: 2, Digest: dg}, RotationCompletedAt: &done}
		}), brewletv1.NodeRuntimeSpec{}, nil, false, "", 3, ""},
		// ...but a generation the fleet completed, or the first one, is.
		{"no directive, rotation completed", &p, ri(func(r *brewletv1.RuntimeImage) {
			done := metav1.Now()
			r.Status.Rotation = &brewletv1.RotationStatus{Target: brewletv1.RotationTarget{Generation: 3, Digest: dg}, RotationCompletedAt: &done}
		}), brewletv1.NodeRuntimeSpec{}, nil, false, "", 3, "reg/rt/py@" + dg},
		{"no directive, generation 1", &p, ri(func(r *brewletv1.RuntimeImage) { r.Status.Generation = 1 }), brewletv1.NodeRuntimeSpec{}, nil, false, "", 1, "reg/rt/py@" + dg},
		{"unknown", &p, nil, brewletv1.NodeRuntimeSpec{}, nil, true, vocab.ReasonUnknownRuntimeImage, 0, ""},
		{"unapproved", &p, ri(func(r *brewletv1.RuntimeImage) {
			r.Status.Conditions = []metav1.Condition{{Type: "Approved", Status: metav1.ConditionFalse, Message: "CVE"}}
		}), brewletv1.NodeRuntimeSpec{}, nil, true, vocab.ReasonRuntimeImageRevoked, 0, ""},
		// Revocation fails closed without the operator: the spec is read on the node, and
		// a generation without Approved=True is not approved.
		{"revoked in spec, operator has not written Approved=False", &p, ri(func(r *brewletv1.RuntimeImage) { r.Spec.Revoked = true }), brewletv1.NodeRuntimeSpec{}, nil, true, vocab.ReasonRuntimeImageRevoked, 0, ""},
		{"no Approved condition", &p, ri(func(r *brewletv1.RuntimeImage) { r.Status.Conditions = nil }), brewletv1.NodeRuntimeSpec{}, nil, true, vocab.ReasonRuntimeImageRevoked, 0, ""},
		{"Approved Unknown", &p, ri(func(r *brewletv1.RuntimeImage) {
			r.Status.Conditions = []metav1.Condition{{Type: "Approved", Status: metav1.ConditionUnknown}}
		}), brewletv1.NodeRuntimeSpec{}, nil, true, vocab.ReasonRuntimeImageRevoked, 0, ""},
		{"no generation yet, no condition yet", &p, ri(func(r *brewletv1.RuntimeImage) { r.Status = brewletv1.RuntimeImageStatus{} }), brewletv1.NodeRuntimeSpec{}, nil, true, vocab.ReasonRuntimeImageNotInstalled, 0, ""},
		{"deleting", &p, ri(func(r *brewletv1.RuntimeImage) { now := metav1.Now(); r.DeletionTimestamp = &now }), brewletv1.NodeRuntimeSpec{}, nil, true, vocab.ReasonRuntimeImageRevoked, 0, ""},
		{"stale epoch in status", &p, ri(func(r *brewletv1.RuntimeImage) { r.Status.Epoch = "old" }), brewletv1.NodeRuntimeSpec{}, nil, true, vocab.ReasonRuntimeImageNotInstalled, 0, ""},
		{"no longer offered", nil, ri(nil), brewletv1.NodeRuntimeSpec{}, []string{"py"}, true, vocab.ReasonRuntimeImageRevoked, 0, ""},
		{"quarantined", &p, ri(nil), brewletv1.NodeRuntimeSpec{Runtimes: []brewletv1.RuntimeDirective{{ID: "py", Quarantine: true}}}, nil, true, vocab.ReasonRuntimeImageRevoked, 0, ""},
		{"wave holds an older generation", &p, ri(nil), brewletv1.NodeRuntimeSpec{Runtimes: []brewletv1.RuntimeDirective{{ID: "py", AllowedGeneration: 2}}}, nil, false, "", 2, ""},
		// spec.source.image moved to another repository; the status still names generation
		// 3's digest: never "new repository @ old digest".
		{"source moved before the operator assigned a generation", &p, ri(func(r *brewletv1.RuntimeImage) {
			r.Spec.Source.Image = "reg/other/py@sha256:2222222222222222222222222222222222222222222222222222222222222222"
		}), brewletv1.NodeRuntimeSpec{Runtimes: []brewletv1.RuntimeDirective{{ID: "py", AllowedGeneration: 3}}}, nil, false, "", 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := Targets(tc.profile, tc.images, tc.spec, tc.held)
			if len(ts) != 1 {
				t.Fatalf("targets %+v", ts)
			}
			got := ts[0]
			if got.Revoke != tc.revoke || got.Reason != tc.reason || got.Generation != tc.gen || got.Image != tc.image {
				t.Fatalf("target %+v", got)
			}
		})
	}
}

// The digest a RuntimeImage accepts as breaking reaches the install request, and nothing
// else does.
func TestTargetsCarryTheAcceptedDigest(t *testing.T) {
	const dg = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	r := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "py", UID: "u1"},
		Spec: brewletv1.RuntimeImageSpec{Source: brewletv1.RuntimeImageSource{Image: "reg/rt/py@" + dg}, User: brewletv1.RuntimeUser{UID: 10, GID: 11},
			Compatibility: &brewletv1.Compatibility{AcceptBreaking: dg}},
		Status: brewletv1.RuntimeImageStatus{Epoch: "u1", Generation: 1, Digest: dg,
			Conditions: []metav1.Condition{{Type: "Approved", Status: metav1.ConditionTrue}}}}
	p := profile("a", "general")
	ts := Targets(&p, map[string]*brewletv1.RuntimeImage{"py": r}, brewletv1.NodeRuntimeSpec{}, nil)
	if len(ts) != 1 || ts[0].AcceptBreaking != dg || requestOf(ts[0]).AcceptBreaking != dg {
		t.Fatalf("targets %+v", ts)
	}
	r.Spec.Compatibility = nil
	if ts := Targets(&p, map[string]*brewletv1.RuntimeImage{"py": r}, brewletv1.NodeRuntimeSpec{}, nil); ts[0].AcceptBreaking != "" {
		t.Fatalf("targets %+v", ts)
	}
}

func TestLabels(t *testing.T) {
	got := Labels(map[string]vocab.RuntimeState{"py": vocab.StateReady, "jre": vocab.StateAvailable, "node": vocab.StateFailed})
	want := map[string]string{"node-restriction.kubernetes.io/brewlet": "ready", "brewlet.sh/runtime": "ready", "node-restriction.kubernetes.io/brewlet.py": "ready", "node-restriction.kubernetes.io/brewlet.jre": "available"}
	if len(got) != len(want) {
		t.Fatalf("labels %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("labels %v, want %v", got, want)
		}
	}
	if got := Labels(map[string]vocab.RuntimeState{"py": vocab.StateAvailable}); got["node-restriction.kubernetes.io/brewlet"] != "ready" {
		t.Fatalf("an OnDemand-only node can start Brewlet containers: %v", got)
	}
	if got := Labels(map[string]vocab.RuntimeState{"py": vocab.StateFailed, "jre": vocab.StateRevoked}); len(got) != 0 {
		t.Fatalf("a node with nothing ready or available claims labels: %v", got)
	}
}

func TestRetryDue(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pause := 10 * time.Second
	pull := vocab.Errorf(vocab.ReasonRuntimeImagePullFailed, "registry down")
	for _, tc := range []struct {
		name  string
		err   error
		after time.Duration
		want  bool
	}{
		{"pull failure, too soon", pull, time.Second, false},
		{"pull failure, after the pause", pull, pause, true},
		{"altered bytes from every source, after the pause", vocab.Errorf(vocab.ReasonDigestMismatch, "x"), pause, true},
		{"refused content is final", vocab.Errorf(vocab.ReasonPrivilegedRuntimeFile, "setuid"), time.Hour, false},
		{"too large is final", vocab.Errorf(vocab.ReasonLimitExceeded, "bomb"), time.Hour, false},
		{"cancelled: at once", fmt.Errorf("install: %w", context.Canceled), 0, true},
		{"lease lost: at once", writer.ErrNotWriter, 0, true},
		{"untyped failure (disk), after the pause", errors.New("no space left"), pause, true},
		{"succeeded but not current any more, after the pause", nil, pause, true},
		{"succeeded just now", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RetryDue(tc.err, at, at.Add(tc.after), pause); got != tc.want {
				t.Fatalf("RetryDue = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidateTiming(t *testing.T) {
	for _, tc := range []struct {
		ttl, period time.Duration
		ok          bool
	}{
		{5 * time.Minute, 0, true},
		{time.Minute, 20 * time.Second, true},
		{5*time.Minute + time.Second, 0, false},
		{time.Hour, 0, false},
		{0, 0, false},
		{-time.Minute, 0, false},
		{time.Minute, 31 * time.Second, false},
		{time.Minute, -time.Second, false},
	} {
		err := ValidateTiming(tc.ttl, tc.period)
		if (err == nil) != tc.ok || (err != nil && vocab.ReasonOf(err) != vocab.ReasonLimitExceeded) {
			t.Errorf("ValidateTiming(%s, %s) = %v, want ok=%v", tc.ttl, tc.period, err, tc.ok)
		}
	}
}

// The containerd mode is the NodeRuntime spec's when it names one, else the agent's flag.
func TestModeOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec brewletv1.NodeRuntimeSpec
		flag vocab.ContainerdRestart
		want vocab.ContainerdRestart
	}{
		{"spec without a mode: the flag", brewletv1.NodeRuntimeSpec{}, vocab.ContainerdRestartNone, vocab.ContainerdRestartNone},
		{"spec none overrides the flag", brewletv1.NodeRuntimeSpec{ContainerdRestart: "none"}, vocab.ContainerdRestartValidated, vocab.ContainerdRestartNone},
		{"spec validated overrides the flag", brewletv1.NodeRuntimeSpec{ContainerdRestart: "validated"}, vocab.ContainerdRestartNone, vocab.ContainerdRestartValidated},
		{"an unknown mode is not obeyed", brewletv1.NodeRuntimeSpec{ContainerdRestart: "always"}, vocab.ContainerdRestartNone, vocab.ContainerdRestartNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ModeOf(tc.spec, tc.flag); got != tc.want {
				t.Fatalf("mode %q, want %q", got, tc.want)
			}
		})
	}
}

// A rollback generation is installed from the spec's repository at the status's digest
// (the spec still names the failed one) and is not held to the failed one's promise; the
// failed digest itself is never pulled for it, and a status naming a digest the spec does
// not, without a rollback, installs nothing.
func TestTargetsOfARollback(t *testing.T) {
	const good, bad = "sha256:1111111111111111111111111111111111111111111111111111111111111111", "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	r := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "py", UID: "u1"},
		Spec: brewletv1.RuntimeImageSpec{Source: brewletv1.RuntimeImageSource{Image: "reg/rt/py@" + bad}, User: brewletv1.RuntimeUser{UID: 10, GID: 11}},
		Status: brewletv1.RuntimeImageStatus{Epoch: "u1", Generation: 4, Digest: good,
			RolledBack: &brewletv1.Rollback{Generation: 4, To: brewletv1.GenerationRef{Generation: 2, Digest: good}, Bad: brewletv1.GenerationRef{Generation: 3, Digest: bad}},
			Conditions: []metav1.Condition{{Type: "Approved", Status: metav1.ConditionTrue}}}}
	p := profile("a", "general")
	spec := brewletv1.NodeRuntimeSpec{Runtimes: []brewletv1.RuntimeDirective{{ID: "py", Install: "Eager", AllowedGeneration: 4}}}
	ts := Targets(&p, map[string]*brewletv1.RuntimeImage{"py": r}, spec, nil)
	if len(ts) != 1 || ts[0].Image != "reg/rt/py@"+good || !ts[0].Rollback || ts[0].Generation != 4 || !requestOf(ts[0]).Rollback {
		t.Fatalf("rollback target %+v", ts)
	}
	// Recorded with the generation it serves again: pulled from there (another repository).
	r.Status.RolledBack.To.Image = "reg/rt/python-old@" + good
	if ts := Targets(&p, map[string]*brewletv1.RuntimeImage{"py": r}, spec, nil); ts[0].Image != "reg/rt/python-old@"+good {
		t.Fatalf("rollback target with the generation's image recorded %+v", ts[0])
	}
	r.Status.RolledBack = nil
	if ts := Targets(&p, map[string]*brewletv1.RuntimeImage{"py": r}, spec, nil); ts[0].Image != "" || ts[0].Rollback {
		t.Fatalf("a status digest the spec does not name, without a rollback: %+v", ts[0])
	}
}
