package uninstall

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

func TestOwed(t *testing.T) {
	p := brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}}
	p.Status.Ledger = []brewletv1.LedgerEntry{{NodeName: "n2", NodeUID: "u2", Owed: true, Message: "owes: remove runtimes python"},
		{NodeName: "n1", NodeUID: "u1", Owed: true, Message: "owes: restore containerd's config and remove the shim (agent: cleanup failed: x)"}}
	p.Status.Conditions = []metav1.Condition{{Type: string(vocab.ConditionRetirementPending), Status: "True", Message: "node(s) n3 left before their cleanup ran"}}
	ri := brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "python"}}
	got := Owed([]brewletv1.NodeProfile{p}, []brewletv1.RuntimeImage{ri})
	for _, want := range []string{"NodeProfile general: nodes n1 (uid u1: restore containerd's config and remove the shim (agent: cleanup failed: x)); n2 (uid u2: remove runtimes python)",
		"n3 left before their cleanup ran", "RuntimeImage python: its nodes have not withdrawn it yet"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if Owed(nil, nil) != "" || OwedLabels(nil) != "" {
		t.Fatal("nothing left must summarize to nothing")
	}
	if got := OwedLabels([]string{"n1", "n2"}); !strings.Contains(got, vocab.LabelHostChanges+"=present") || !strings.Contains(got, "n1, n2") {
		t.Errorf("labeled nodes summary %q", got)
	}
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := brewletv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Run deletes both kinds and succeeds once their finalizers are gone (as the operator
// releases them); it fails naming what is owed when they stay, and never removes one.
func TestRun(t *testing.T) {
	held := func() []client.Object {
		p := &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general", Finalizers: []string{vocab.FinalizerCleanup}}}
		p.Status.Ledger = []brewletv1.LedgerEntry{{NodeName: "n1", NodeUID: "u1", Owed: true, Message: "owes: remove runtimes python"}}
		return []client.Object{p, &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "python", Finalizers: []string{vocab.FinalizerRevocation}}}}
	}
	t.Run("cleanup never finishes: fails naming the node, finalizers kept", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(scheme(t)).WithStatusSubresource(&brewletv1.NodeProfile{}).WithObjects(held()...).Build()
		var out bytes.Buffer
		err := Run(context.Background(), c, 300*time.Millisecond, 50*time.Millisecond, &out)
		if err == nil || !strings.Contains(err.Error(), "n1 (uid u1: remove runtimes python)") || !strings.Contains(err.Error(), "stays installed") {
			t.Fatalf("error %v", err)
		}
		p := &brewletv1.NodeProfile{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: "general"}, p); err != nil || p.DeletionTimestamp == nil || len(p.Finalizers) != 1 {
			t.Fatalf("profile %+v %v: deleted, finalizer kept", p.ObjectMeta, err)
		}
	})
	t.Run("cleanup finishes: success", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(held()...).Build()
		go func() {
			time.Sleep(200 * time.Millisecond)
			for _, o := range []client.Object{&brewletv1.NodeProfile{}, &brewletv1.RuntimeImage{}} {
				key := client.ObjectKey{Name: "general"}
				if _, ok := o.(*brewletv1.RuntimeImage); ok {
					key.Name = "python"
				}
				if err := c.Get(context.Background(), key, o); err == nil {
					o.SetFinalizers(nil)
					_ = c.Update(context.Background(), o)
				}
			}
		}()
		var out bytes.Buffer
		if err := Run(context.Background(), c, 10*time.Second, 50*time.Millisecond, &out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "deleted 1 NodeProfile(s) and 1 RuntimeImage(s)") || !strings.Contains(out.String(), "every node is cleaned up") {
			t.Fatalf("progress:\n%s", out.String())
		}
	})
	t.Run("a node still labeled with the host-changes label keeps the hook waiting", func(t *testing.T) {
		labeled := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{vocab.LabelHostChanges: vocab.LabelValuePresent}}}
		other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{"pool": "general"}}}
		c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(labeled, other).Build()
		var out bytes.Buffer
		err := Run(context.Background(), c, 300*time.Millisecond, 50*time.Millisecond, &out)
		if err == nil || !strings.Contains(err.Error(), vocab.LabelHostChanges+"=present, their agents finishing the cleanup: n1") || strings.Contains(err.Error(), "n2") {
			t.Fatalf("error %v", err)
		}
		go func() {
			time.Sleep(200 * time.Millisecond)
			n := &corev1.Node{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, n); err == nil {
				n.Labels = nil
				_ = c.Update(context.Background(), n)
			}
		}()
		out.Reset()
		if err := Run(context.Background(), c, 10*time.Second, 50*time.Millisecond, &out); err != nil || !strings.Contains(out.String(), "still owed: nodes still labeled") {
			t.Fatalf("%v\n%s", err, out.String())
		}
	})
}
