package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/gc"
	"brewlet.sh/brewlet/internal/provisioner/writer"
	"brewlet.sh/brewlet/test/framework"
)

// Two agents on one node (a rolling update) never write at the same time: only the holder
// of the node's writer lease runs, and the other takes over when it goes.
func TestWriterLeaseOneAgentAtATime(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{SkipCRDs: true})
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-system"}}); err != nil {
		t.Fatal(err)
	}
	var writers, maxWriters atomic.Int32
	var leaders sync.Map
	agent := func(ctx context.Context, name string) {
		_ = writer.Lease{Client: cs, Namespace: "brewlet-system", NodeName: "n1", Identity: name, Duration: 10 * time.Second}.
			Run(ctx, func(ctx context.Context, isWriter func() bool) {
				leaders.Store(name, true)
				for ctx.Err() == nil {
					if isWriter() {
						w := writers.Add(1)
						if w > maxWriters.Load() {
							maxWriters.Store(w)
						}
						time.Sleep(50 * time.Millisecond) // a host change
						writers.Add(-1)
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
	}
	ctxOld, stopOld := context.WithCancel(context.Background())
	ctxNew, stopNew := context.WithCancel(context.Background())
	defer stopNew()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); agent(ctxOld, "agent-old") }()
	time.Sleep(time.Second)
	go func() { defer wg.Done(); agent(ctxNew, "agent-new") }()
	time.Sleep(4 * time.Second)
	if _, ok := leaders.Load("agent-new"); ok {
		t.Fatal("the new agent wrote while the old one held the lease")
	}
	stopOld() // the old pod terminates and releases the lease
	deadline := time.Now().Add(45 * time.Second)
	for {
		if _, ok := leaders.Load("agent-new"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new agent never took over")
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopNew()
	wg.Wait()
	if maxWriters.Load() > 1 {
		t.Fatalf("%d agents wrote at once", maxWriters.Load())
	}
}

// The writer lease changes hands in the middle of garbage collection: the old holder stops
// removing at its next lease check, the new one collects the rest, and no two agents remove
// at the same moment (the lease, plus the layer cache lock GC holds exclusively). When the
// new holder is stopped mid-sweep, it finishes its lead before the lease is released, so
// the old agent takes over only after it. Run with -race (make test-e2e does).
func TestWriterLeaseFlipDuringGC(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{SkipCRDs: true})
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-system"}}); err != nil {
		t.Fatal(err)
	}
	host := hoststate.Under(t.TempDir())
	layers := func(n int, prefix string) {
		for i := range n {
			name := fmt.Sprintf("%s%060d", prefix, i)
			if err := os.MkdirAll(filepath.Join(host.LayerDir(name), "usr"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	layers(1500, "aaaa")

	var mu sync.Mutex
	removing := 0
	var maxRemoving int
	removedBy := map[string]int{}
	lastBy := map[string]time.Time{}
	firstBy := map[string]time.Time{}
	var leads []string // "+name" when a lead starts, "-name" when it returned
	agent := func(ctx context.Context, name string) {
		collector := &gc.Collector{Layout: host, MountInfo: "/proc/self/mountinfo", Remove: func(p string) error {
			mu.Lock()
			removing++
			maxRemoving = max(maxRemoving, removing)
			mu.Unlock()
			time.Sleep(3 * time.Millisecond) // a large layer
			err := os.RemoveAll(p)
			mu.Lock()
			removing--
			removedBy[name]++
			if firstBy[name].IsZero() {
				firstBy[name] = time.Now()
			}
			lastBy[name] = time.Now()
			mu.Unlock()
			return err
		}}
		_ = writer.Lease{Client: cs, Namespace: "brewlet-system", NodeName: "n1", Identity: name, Duration: 5 * time.Second}.
			Run(ctx, func(ctx context.Context, isWriter func() bool) {
				mu.Lock()
				leads = append(leads, "+"+name)
				mu.Unlock()
				for ctx.Err() == nil {
					_, _ = collector.Sweep(ctx, isWriter)
					time.Sleep(20 * time.Millisecond)
				}
				mu.Lock()
				leads = append(leads, "-"+name)
				mu.Unlock()
			})
	}
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return removedBy[name]
	}
	ctxOld, stopOld := context.WithCancel(ctx)
	ctxNew, stopNew := context.WithCancel(ctx)
	defer stopOld()
	defer stopNew()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); agent(ctxOld, "agent-old") }()
	waitFor(t, 30*time.Second, "the old agent to collect", func() bool { return count("agent-old") >= 100 })
	go func() { defer wg.Done(); agent(ctxNew, "agent-new") }()

	// The flip: the lease now names the new agent (as after an expiry and a takeover).
	lease, err := cs.CoordinationV1().Leases("brewlet-system").Get(ctx, writer.LeaseName("n1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder, now := "agent-new", metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity, lease.Spec.AcquireTime, lease.Spec.RenewTime = &holder, &now, &now
	if _, err := cs.CoordinationV1().Leases("brewlet-system").Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	flipped := time.Now()
	waitFor(t, 60*time.Second, "the new agent to collect the rest", func() bool {
		ents, _ := os.ReadDir(host.LayerDir(""))
		return len(ents) == 0
	})
	mu.Lock()
	if last := lastBy["agent-old"]; last.After(flipped.Add(3 * time.Second)) {
		t.Errorf("the old agent removed layers %s after losing the lease", last.Sub(flipped))
	}
	if removedBy["agent-new"] == 0 || firstBy["agent-new"].Before(lastBy["agent-old"]) {
		t.Errorf("removals overlapped or the new agent never collected: old %d (last %s), new %d (first %s)",
			removedBy["agent-old"], lastBy["agent-old"], removedBy["agent-new"], firstBy["agent-new"])
	}
	mu.Unlock()

	// The new holder is stopped (its pod terminates) mid-sweep: its lead returns before the
	// lease is released, and only then does the old agent lead again.
	waitFor(t, 30*time.Second, "the old agent's lead to end", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(leads, "-agent-old")
	})
	layers(1500, "bbbb")
	base := count("agent-new")
	mu.Lock()
	phase2 := len(leads)
	mu.Unlock()
	waitFor(t, 30*time.Second, "the new agent to collect the second batch", func() bool { return count("agent-new") >= base+100 })
	stopNew()
	waitFor(t, 60*time.Second, "the old agent to take over", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return leads[len(leads)-1] == "+agent-old"
	})
	stopOld()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if maxRemoving > 1 {
		t.Errorf("%d removals ran at once", maxRemoving)
	}
	// A graceful handover: the new agent's lead ended before the old one's began.
	if got := strings.Join(leads[phase2:], " "); !strings.HasPrefix(got, "-agent-new +agent-old") {
		t.Fatalf("leads after stopping the new agent: %q (all: %v)", got, leads)
	}
}
