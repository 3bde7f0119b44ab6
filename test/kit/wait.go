package kit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// WaitGeneration waits until brewlet-operator (running in the test) has assigned generation
// gen to the RuntimeImage's current digest, approved it, and allowed it on every node's
// NodeRuntime spec, so that the agent's next pass sees what the operator decided.
func WaitGeneration(t *testing.T, c client.Client, ri *brewletv1.RuntimeImage, gen int64) {
	t.Helper()
	ctx := context.Background()
	Eventually(t, 60*time.Second, fmt.Sprintf("RuntimeImage %s at generation %d", ri.Name, gen), func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ri), ri); err != nil {
			return false, err.Error()
		}
		_, digest, _ := strings.Cut(ri.Spec.Source.Image, "@")
		st := ri.Status
		if st.Epoch != ri.UID || st.Generation != gen || st.Digest != digest || !meta.IsStatusConditionTrue(st.Conditions, string(vocab.ConditionApproved)) {
			return false, fmt.Sprintf("status %+v", st)
		}
		var nrts brewletv1.NodeRuntimeList
		if err := c.List(ctx, &nrts); err != nil {
			return false, err.Error()
		}
		for _, n := range nrts.Items {
			for _, d := range n.Spec.Runtimes {
				if d.ID == ri.Name && d.AllowedGeneration != 0 && d.AllowedGeneration < gen {
					return false, fmt.Sprintf("node %s allowed generation %d", n.Name, d.AllowedGeneration)
				}
			}
		}
		return true, ""
	})
}

// ExpectDenied fails unless err is an API refusal whose message contains want.
func ExpectDenied(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the API server accepted the object; want a refusal mentioning %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q does not mention %q", err.Error(), want)
	}
}

func ExpectReason(t *testing.T, err error, r vocab.Reason) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), string(r)+": ") {
		t.Fatalf("got %v; want a CRI error carrying %q", err, r)
	}
}

// WaitNodeScopeDenies waits until the node-scope policy, which takes effect asynchronously,
// refuses the agent's write to another node's NodeRuntime.
func WaitNodeScopeDenies(t *testing.T, agent client.Client, other string) {
	t.Helper()
	WaitDenied(t, "write to another node's NodeRuntime", "agents write only their own node", func() error {
		return WriteStatus(context.Background(), agent, other)
	})
}

// WaitDenied retries write until it fails with an error mentioning want, for 30s: an
// admission policy and its binding, like an RBAC change, take effect asynchronously.
func WaitDenied(t *testing.T, what, want string, write func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := write()
		if err != nil && strings.Contains(err.Error(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not denied: %v", what, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// Eventually polls cond until it holds or the deadline passes.
func Eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not reached within %s; last seen: %s", what, d, last)
}

func Must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
