package nodeprofile

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

// cleaned is a NodeRuntime whose agent reports, for the node's UID, the IDs still on disk
// and whether its cleanup is done.
func cleaned(name string, done bool, installed ...string) *brewletv1.NodeRuntime {
	r := nrt(name)
	r.Status.NodeUID = types.UID("uid-" + name)
	r.Status.Cleanup = &brewletv1.NodeCleanup{Done: done, InstalledRuntimes: installed}
	return r
}

func entry(name string, owed bool, ids ...string) brewletv1.LedgerEntry {
	return brewletv1.LedgerEntry{NodeName: name, NodeUID: types.UID("uid-" + name), RuntimeImages: ids, ContainerdConfig: true, Owed: owed}
}

// render shows a ledger as "name:ids:containerd:owed" entries.
func render(l []brewletv1.LedgerEntry) string {
	var out []string
	for _, e := range l {
		out = append(out, fmt.Sprintf("%s:%s:%t:%t", e.NodeName, strings.Join(e.RuntimeImages, "+"), e.ContainerdConfig, e.Owed))
	}
	return strings.Join(out, " ")
}

func TestLedger(t *testing.T) {
	general := []string{"general"}
	deleting := func(p brewletv1.NodeProfile) brewletv1.NodeProfile {
		p.DeletionTimestamp = &metav1.Time{Time: now.Time}
		return p
	}
	withLedger := func(p brewletv1.NodeProfile, es ...brewletv1.LedgerEntry) brewletv1.NodeProfile {
		p.Status.Ledger = es
		return p
	}
	recreated := node("a", "general")
	recreated.UID = "uid-a-2"
	for _, tc := range []struct {
		name       string
		in         Input
		accepted   map[string]bool
		want       string
		cleanup    string // CleanupComplete status/reason
		retirement string
		release    bool
	}{
		{name: "served nodes are recorded with what the profile offers",
			in:   input(prof("p", 1, general, "py", "node"), nil, []corev1.Node{node("a", "general"), node("b", "batch")}, nil),
			want: "a:node+py:true:false", cleanup: "True/NothingOwed", retirement: "False/NoRetirementPending"},
		{name: "an ID the profile stopped offering stays until the node reports it gone",
			in: input(withLedger(prof("p", 1, general, "py"), entry("a", false, "old", "py")), nil, []corev1.Node{node("a", "general")}, nil,
				cleaned("a", false, "old", "py")),
			want: "a:old+py:true:false", cleanup: "True/NothingOwed", retirement: "False/NoRetirementPending"},
		{name: "... and leaves once it is gone",
			in: input(withLedger(prof("p", 1, general, "py"), entry("a", false, "old", "py")), nil, []corev1.Node{node("a", "general")}, nil,
				cleaned("a", false, "py")),
			want: "a:py:true:false", cleanup: "True/NothingOwed", retirement: "False/NoRetirementPending"},
		{name: "a node that left the pool owes cleanup until its agent reports done",
			in: input(withLedger(prof("p", 1, general, "py"), entry("a", false, "py")), nil, []corev1.Node{node("a", "batch")}, nil,
				cleaned("a", false)),
			want: "a::true:true", cleanup: "False/CleanupPending", retirement: "False/NoRetirementPending"},
		{name: "done for that UID: the entry goes",
			in: input(withLedger(prof("p", 1, general, "py"), entry("a", true, "py")), nil, []corev1.Node{node("a", "batch")}, nil,
				cleaned("a", true)),
			cleanup: "True/NothingOwed", retirement: "False/NoRetirementPending"},
		{name: "a report for another UID proves nothing",
			in: input(withLedger(prof("p", 1, general, "py"), entry("a", true, "py")), nil, []corev1.Node{node("a", "batch")}, nil,
				func() *brewletv1.NodeRuntime { r := cleaned("a", true); r.Status.NodeUID = "uid-other"; return r }()),
			want: "a:py:true:true", cleanup: "False/CleanupPending", retirement: "False/NoRetirementPending"},
		{name: "the profile deleted: everything owed, the finalizer holds",
			in: input(deleting(withLedger(prof("p", 1, general, "py"), entry("a", false, "py"))), nil, []corev1.Node{node("a", "general")}, nil,
				cleaned("a", false, "py")),
			want: "a:py:true:true", cleanup: "False/CleanupPending", retirement: "False/NoRetirementPending"},
		{name: "the profile deleted and every node done: release",
			in: input(deleting(withLedger(prof("p", 1, general, "py"), entry("a", true, "py"))), nil, []corev1.Node{node("a", "general")}, nil,
				cleaned("a", true)),
			cleanup: "True/NothingOwed", retirement: "False/NoRetirementPending", release: true},
		{name: "another profile took the node over: it keeps the host and its own IDs",
			in: input(withLedger(prof("p", 1, general, "py", "node"), entry("a", false, "node", "py")),
				[]brewletv1.NodeProfile{prof("q", 2, []string{"batch"}, "py")}, []corev1.Node{node("a", "batch")}, nil,
				cleaned("a", false, "node", "py")),
			want: "a:node:false:true", cleanup: "False/CleanupPending", retirement: "False/NoRetirementPending"},
		{name: "a deleted node keeps its obligation: retirement pending",
			in:   input(withLedger(prof("p", 1, general, "py"), entry("a", false, "py")), nil, nil, nil),
			want: "a:py:true:true", cleanup: "False/CleanupPending", retirement: "True/RetirementPending"},
		{name: "a recreated node (same name, new UID): the old obligation stays, the new node is served",
			in: input(withLedger(prof("p", 1, general, "py"), entry("a", false, "py")), nil, []corev1.Node{recreated}, nil,
				cleaned("a", true)),
			want: "a:py:true:true a:py:true:false", cleanup: "False/CleanupPending", retirement: "True/RetirementPending"},
		{name: "accepted evidence resolves the gone node's obligation",
			in:       input(deleting(withLedger(prof("p", 1, general, "py"), entry("a", true, "py"))), nil, nil, nil),
			accepted: map[string]bool{"a/uid-a": true},
			cleanup:  "True/NothingOwed", retirement: "False/NoRetirementPending", release: true},
		{name: "evidence for a live node resolves nothing",
			in: input(deleting(withLedger(prof("p", 1, general, "py"), entry("a", true, "py"))), nil, []corev1.Node{node("a", "general")}, nil,
				cleaned("a", false, "py")),
			accepted: map[string]bool{"a/uid-a": true},
			want:     "a:py:true:true", cleanup: "False/CleanupPending", retirement: "False/NoRetirementPending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			var assigned []string
			assigned = append(assigned, d.Assigned...)
			ld := Ledger(tc.in, assigned, tc.accepted)
			if got := render(ld.Ledger); got != tc.want {
				t.Fatalf("ledger %q, want %q", got, tc.want)
			}
			if got := string(ld.Cleanup.Status) + "/" + ld.Cleanup.Reason; got != tc.cleanup {
				t.Fatalf("CleanupComplete %s (%s), want %s", got, ld.Cleanup.Message, tc.cleanup)
			}
			if got := string(ld.Retirement.Status) + "/" + ld.Retirement.Reason; got != tc.retirement {
				t.Fatalf("RetirementPending %s (%s), want %s", got, ld.Retirement.Message, tc.retirement)
			}
			if ld.Release != tc.release {
				t.Fatalf("release %t", ld.Release)
			}
			for _, e := range ld.Ledger {
				if e.Owed && (e.Since == nil || e.Message == "") {
					t.Fatalf("owed entry without since or message: %+v", e)
				}
			}
		})
	}
}

// A node's own report cannot grow the profile's status: its message is clipped.
func TestLedgerClipsAgentMessages(t *testing.T) {
	r := cleaned("a", false, "py")
	r.Status.Cleanup.Message = strings.Repeat("é", 5000)
	p := prof("p", 1, []string{"general"}, "py")
	p.Status.Ledger = []brewletv1.LedgerEntry{entry("a", true, "py")}
	in := input(p, nil, []corev1.Node{node("a", "batch")}, nil, r)
	ld := Ledger(in, nil, nil)
	if len(ld.Ledger) != 1 || len(ld.Ledger[0].Message) > 400 || !strings.HasSuffix(ld.Ledger[0].Message, "…)") {
		t.Fatalf("ledger message of %d bytes: %.80q", len(ld.Ledger[0].Message), ld.Ledger[0].Message)
	}
}
