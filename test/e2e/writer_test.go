package e2e

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"brewlet.sh/brewlet/internal/provisioner"
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
		_ = provisioner.WriterLease{Client: cs, Namespace: "brewlet-system", NodeName: "n1", Identity: name, Duration: 10 * time.Second}.
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
