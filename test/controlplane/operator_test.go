package controlplane

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/operator"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// startOperatorWith runs brewlet-operator in-process with the constructor main uses and the
// test's own changes to the options: for what no flag sets (certificate lifetimes of
// seconds, in the pod admission test). Everything else runs the process (kit.StartOperator).
func startOperatorWith(t *testing.T, cp *framework.ControlPlane, edit func(*operator.Options)) *kit.RunningOperator {
	t.Helper()
	lvl := slog.LevelError
	if os.Getenv("BREWLET_OPERATOR_LOG") != "" {
		lvl = slog.LevelDebug
	}
	var out io.Writer = os.Stderr
	logger := logr.FromSlogHandler(slog.NewTextHandler(out, &slog.HandlerOptions{Level: lvl}))
	kit.SetLoggerOnce.Do(func() { ctrllog.SetLogger(logger) })
	ro := &kit.RunningOperator{
		Probe:   fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t)),
		Metrics: fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t)),
	}
	ctx, cancel := context.WithCancel(context.Background())
	opts := operator.Options{
		MetricsAddress:          ro.Metrics,
		ProbeAddress:            ro.Probe,
		LeaderElectionNamespace: kit.ChartNS,
		LeaseDuration:           4 * time.Second,
		RenewDeadline:           3 * time.Second,
		RetryPeriod:             500 * time.Millisecond,
		Logger:                  logger,
		SkipNameValidation:      true,
	}
	edit(&opts)
	mgr, err := operator.New(ctx, cp.Config, opts)
	if err != nil {
		cancel()
		t.Fatalf("operator.New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	ro.Stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("operator stopped with %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Errorf("operator did not stop within 60s")
			}
		})
	}
	t.Cleanup(ro.Stop)
	return ro
}

func getRI(t *testing.T, c client.Client, name string) *brewletv1.RuntimeImage {
	t.Helper()
	ri := &brewletv1.RuntimeImage{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: name}, ri); err != nil {
		t.Fatalf("get RuntimeImage %s: %v", name, err)
	}
	return ri
}

func approved(ri *brewletv1.RuntimeImage) *metav1.Condition {
	return meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionApproved))
}

// caughtUp: the operator has described this exact spec.
func caughtUp(ri *brewletv1.RuntimeImage) bool {
	c := approved(ri)
	return ri.Status.ObservedGeneration == ri.Generation && c != nil && c.ObservedGeneration == ri.Generation &&
		ri.Status.Epoch == ri.UID && ri.Status.Digest == kit.DigestOf(ri.Spec.Source.Image)
}

// seen is one status a watcher saw, in the API server's order.
type seen struct {
	epoch  types.UID
	gen    int64
	digest string
}

// recordStatuses watches one RuntimeImage from before its creation and records every
// distinct status (epoch, generation, digest) the API server stored, in order.
func recordStatuses(t *testing.T, cp *framework.ControlPlane, name string) func() []seen {
	t.Helper()
	wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := wc.Watch(ctx, &brewletv1.RuntimeImageList{}, client.MatchingFields{"metadata.name": name})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out []seen
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			ri, ok := ev.Object.(*brewletv1.RuntimeImage)
			if !ok || ev.Type == watch.Error {
				continue
			}
			s := seen{ri.Status.Epoch, ri.Status.Generation, ri.Status.Digest}
			mu.Lock()
			if len(out) == 0 || out[len(out)-1] != s {
				out = append(out, s)
			}
			mu.Unlock()
		}
	}()
	stop := func() { w.Stop(); cancel(); <-done }
	t.Cleanup(stop)
	return func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), out...)
	}
}

func TestOperatorRuntimeImage(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	c := cp.Client

	t.Run("generations survive concurrent edits and operator restarts", func(t *testing.T) {
		testGenerationsUnderRestarts(t, cp)
	})
	t.Run("two replicas without leader election keep the sequence exact", func(t *testing.T) {
		testSplitBrain(t, cp)
	})
	op := kit.StartOperator(t, cp, true)
	t.Run("health, readiness, metrics and the leader Lease", func(t *testing.T) {
		ctx := context.Background()
		if err := c.Create(ctx, kit.RuntimeImage("node-22", "127.0.0.1:5000/runtimes/node@"+kit.DigestN(1))); err != nil {
			t.Fatal(err)
		}
		kit.Eventually(t, 30*time.Second, "node-22 generation 1", func() (bool, string) {
			ri := getRI(t, c, "node-22")
			return caughtUp(ri) && ri.Status.Generation == 1, fmt.Sprintf("%+v", ri.Status)
		})
		for _, u := range []string{"http://" + op.Probe + "/healthz", "http://" + op.Probe + "/readyz"} {
			kit.Eventually(t, 30*time.Second, u, func() (bool, string) {
				_, err := httpGet(u)
				return err == nil, fmt.Sprint(err)
			})
		}
		// Metrics over HTTPS, to the scraper's token only (TestMetricsNeedATokenWithTheRight
		// has the refusals; here the operator's own wiring under the chart's RBAC).
		kit.Eventually(t, 30*time.Second, "the generation gauge", func() (bool, string) {
			body, err := kit.ScrapeMetrics(t, cp, op.Metrics)
			if err != nil {
				return false, err.Error()
			}
			return strings.Contains(body, `brewlet_operator_runtime_image_generation{id="node-22"} 1`), "no generation gauge for node-22"
		})
		for _, token := range []string{"", kit.SAToken(t, cp, "default", "not-a-scraper", false)} {
			if body, code, err := kit.GetMetrics(op.Metrics, token); err != nil || code == http.StatusOK || strings.Contains(body, "brewlet_operator") {
				t.Errorf("operator metrics without the scraper's right: %d %v", code, err)
			}
		}
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: kit.ChartNS, Name: operator.DefaultLeaderElectionID}, lease); err != nil {
			t.Fatalf("leader Lease: %v", err)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Fatalf("leader Lease has no holder: %+v", lease.Spec)
		}
	})
	t.Run("revoked is the kill switch and re-approves the same epoch", func(t *testing.T) {
		testRevoked(t, cp)
	})
	t.Run("deletion waits until every node withdrew the epoch", func(t *testing.T) {
		testDeletionWaitsForNodes(t, cp)
	})
}

func httpGet(u string) (string, error) {
	resp, err := http.Get(u) //nolint:gosec // a loopback URL the test built
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s %s", u, resp.Status, b)
	}
	return string(b), err
}

func testGenerationsUnderRestarts(t *testing.T, cp *framework.ControlPlane) {
	ctx, c := context.Background(), cp.Client
	const name = "python-3.12"
	statuses := recordStatuses(t, cp, name)
	op := kit.StartOperator(t, cp, true)
	if err := c.Create(ctx, kit.RuntimeImage(name, "127.0.0.1:5000/runtimes/python@"+kit.DigestN(0))); err != nil {
		t.Fatal(err)
	}
	kit.Eventually(t, 30*time.Second, "generation 1", func() (bool, string) {
		ri := getRI(t, c, name)
		return caughtUp(ri) && ri.Status.Generation == 1, fmt.Sprintf("%+v", ri.Status)
	})

	// Three editors rotate the image while the operator is stopped and replaced twice;
	// some edits land while no operator runs at all.
	const editors, editsEach = 3, 40
	var edited atomic.Int64
	wg := startEditors(t, c, name, "127.0.0.1:5000/runtimes/python", editors, editsEach, 100*time.Millisecond, &edited)
	var atRestart []int64
	for r := 0; r < 2; r++ {
		time.Sleep(500 * time.Millisecond)
		op.Stop()
		time.Sleep(200 * time.Millisecond)
		atRestart = append(atRestart, edited.Load())
		op = kit.StartOperator(t, cp, true)
	}
	wg.Wait()
	if atRestart[1] >= editors*editsEach {
		t.Fatalf("the edits were over before the second restart (%v of %d): the restarts raced nothing", atRestart, editors*editsEach)
	}
	kit.Eventually(t, 60*time.Second, "status caught up with the last edit", func() (bool, string) {
		ri := getRI(t, c, name)
		return caughtUp(ri), fmt.Sprintf("spec %s, metadata.generation %d, status %+v", ri.Spec.Source.Image, ri.Generation, ri.Status)
	})
	final := getRI(t, c, name)

	seq := checkSequence(t, statuses, final, kit.DigestN(0), editors*editsEach)
	t.Logf("%d edits, %d generations observed, operator restarted after edits %v", editors*editsEach, len(seq), atRestart)

	// A further restart with nothing changed writes nothing (status is the memory).
	op.Stop()
	op = kit.StartOperator(t, cp, true)
	time.Sleep(3 * time.Second)
	again := getRI(t, c, name)
	if again.ResourceVersion != final.ResourceVersion {
		t.Fatalf("a restarted operator rewrote an unchanged object: %+v -> %+v", final.Status, again.Status)
	}
	op.Stop()
}

func testRevoked(t *testing.T, cp *framework.ControlPlane) {
	ctx, c := context.Background(), cp.Client
	const name = "jre-21"
	if err := c.Create(ctx, kit.RuntimeImage(name, "127.0.0.1:5000/runtimes/jre@"+kit.DigestN(7))); err != nil {
		t.Fatal(err)
	}
	want := func(status metav1.ConditionStatus, reason vocab.Reason) {
		t.Helper()
		kit.Eventually(t, 30*time.Second, fmt.Sprintf("Approved=%s/%s", status, reason), func() (bool, string) {
			ri := getRI(t, c, name)
			a := approved(ri)
			ok := caughtUp(ri) && a != nil && a.Status == status && a.Reason == string(reason) && ri.Status.Generation == 1
			return ok, fmt.Sprintf("%+v", ri.Status)
		})
	}
	want(metav1.ConditionTrue, vocab.ReasonApproved)
	uid := getRI(t, c, name).UID
	kit.UpdateRI(t, c, name, func(ri *brewletv1.RuntimeImage) { ri.Spec.Revoked = true })
	want(metav1.ConditionFalse, vocab.ReasonRevoked)
	kit.UpdateRI(t, c, name, func(ri *brewletv1.RuntimeImage) { ri.Spec.Revoked = false })
	want(metav1.ConditionTrue, vocab.ReasonApproved)
	if ri := getRI(t, c, name); ri.Status.Epoch != uid {
		t.Fatalf("re-approval changed the epoch %s -> %s", uid, ri.Status.Epoch)
	}
}

// nodeReport writes a NodeRuntime status as the node's agent would.
func nodeReport(t *testing.T, c client.Client, node string, entries ...brewletv1.NodeRuntimeEntry) {
	t.Helper()
	ctx := context.Background()
	nrt := &brewletv1.NodeRuntime{}
	err := c.Get(ctx, types.NamespacedName{Name: node}, nrt)
	if apierrors.IsNotFound(err) {
		nrt = &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: node}}
		err = c.Create(ctx, nrt)
	}
	if err != nil {
		t.Fatalf("NodeRuntime %s: %v", node, err)
	}
	now := metav1.Now()
	nrt.Status = brewletv1.NodeRuntimeStatus{ObservedAt: &now, Complete: true, Runtimes: entries}
	if err := c.Status().Update(ctx, nrt); err != nil {
		t.Fatalf("NodeRuntime %s status: %v", node, err)
	}
}

func testDeletionWaitsForNodes(t *testing.T, cp *framework.ControlPlane) {
	ctx, c := context.Background(), cp.Client
	const name = "static"
	if err := c.Create(ctx, kit.RuntimeImage(name, "127.0.0.1:5000/runtimes/static@"+kit.DigestN(9))); err != nil {
		t.Fatal(err)
	}
	var ri *brewletv1.RuntimeImage
	kit.Eventually(t, 30*time.Second, "generation 1 and the finalizer", func() (bool, string) {
		ri = getRI(t, c, name)
		return caughtUp(ri) && ri.Status.Generation == 1 && len(ri.Finalizers) == 1, fmt.Sprintf("%v %+v", ri.Finalizers, ri.Status)
	})
	ready := brewletv1.NodeRuntimeEntry{ID: name, Epoch: ri.UID, Generation: 1, Digest: kit.DigestN(9), State: string(vocab.StateReady)}
	withdrawn := brewletv1.NodeRuntimeEntry{ID: name, State: string(vocab.StateRevoked), Reason: string(vocab.ReasonRuntimeImageRevoked)}
	nodeReport(t, c, "node-a", ready)
	nodeReport(t, c, "node-b", withdrawn)
	if err := c.Delete(ctx, ri); err != nil {
		t.Fatal(err)
	}
	kit.Eventually(t, 30*time.Second, "Approved=False/Deleting naming node-a", func() (bool, string) {
		ri := getRI(t, c, name)
		a := approved(ri)
		return a != nil && a.Status == metav1.ConditionFalse && a.Reason == string(vocab.ReasonDeleting) &&
			strings.Contains(a.Message, "node-a") && !strings.Contains(a.Message, "node-b"), fmt.Sprintf("%+v", ri.Status)
	})
	time.Sleep(2 * time.Second)
	if ri := getRI(t, c, name); ri.DeletionTimestamp == nil || len(ri.Finalizers) != 1 {
		t.Fatalf("want the object held by its finalizer while node-a reports the epoch: %+v", ri.ObjectMeta)
	}
	nodeReport(t, c, "node-a", withdrawn) // the agent revoked: entry without the epoch
	kit.Eventually(t, 30*time.Second, "deletion completed", func() (bool, string) {
		err := c.Get(ctx, types.NamespacedName{Name: name}, &brewletv1.RuntimeImage{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// Recreating the name starts a new epoch at generation 1.
	if err := c.Create(ctx, kit.RuntimeImage(name, "127.0.0.1:5000/runtimes/static@"+kit.DigestN(10))); err != nil {
		t.Fatal(err)
	}
	kit.Eventually(t, 30*time.Second, "new epoch at generation 1", func() (bool, string) {
		again := getRI(t, c, name)
		return caughtUp(again) && again.Status.Generation == 1 && again.Status.Epoch != ri.UID, fmt.Sprintf("%+v", again.Status)
	})
}

// checkSequence checks the statuses the API server stored for one RuntimeImage: the first
// is generation 1 of first in the object's epoch; then never down, +1 per digest change,
// one epoch; the last is final's status. It returns the generations seen.
func checkSequence(t *testing.T, statuses func() []seen, final *brewletv1.RuntimeImage, first string, edits int) []seen {
	t.Helper()
	end := seen{final.Status.Epoch, final.Status.Generation, final.Status.Digest}
	kit.Eventually(t, 10*time.Second, "the watch reached the final status", func() (bool, string) {
		s := statuses()
		return len(s) > 0 && s[len(s)-1] == end, fmt.Sprint(s[max(0, len(s)-1):])
	})
	var seq []seen
	for _, s := range statuses() {
		if s.gen != 0 {
			seq = append(seq, s)
		}
	}
	if len(seq) == 0 || seq[0] != (seen{final.UID, 1, first}) {
		t.Fatalf("first status %v; want generation 1 of %s in epoch %s", seq[:min(1, len(seq))], first, final.UID)
	}
	for i := 1; i < len(seq); i++ {
		prev, cur := seq[i-1], seq[i]
		if cur.epoch != final.UID {
			t.Fatalf("status %d has epoch %s; want the UID %s", i, cur.epoch, final.UID)
		}
		if cur.gen < prev.gen {
			t.Fatalf("generation decreased %d -> %d (statuses %v)", prev.gen, cur.gen, seq)
		}
		if cur.digest != prev.digest && cur.gen != prev.gen+1 {
			t.Fatalf("digest %s -> %s moved generation %d -> %d; want +1", prev.digest, cur.digest, prev.gen, cur.gen)
		}
		if cur.digest == prev.digest && cur.gen != prev.gen {
			t.Fatalf("generation %d -> %d without a digest change", prev.gen, cur.gen)
		}
	}
	last := seq[len(seq)-1]
	if last.gen != final.Status.Generation || last.digest != final.Status.Digest || final.Status.Generation != int64(len(seq)) {
		t.Fatalf("final status %+v does not end the sequence of %d generations %v", final.Status, len(seq), seq)
	}
	if len(seq) < 4 {
		t.Fatalf("the operator observed only %d generations for %d edits; the test proved little", len(seq), edits)
	}
	return seq
}

// testSplitBrain runs two replicas without leader election against concurrent edits: the
// resourceVersion preconditions alone must keep the generation sequence exact.
func testSplitBrain(t *testing.T, cp *framework.ControlPlane) {
	ctx, c := context.Background(), cp.Client
	const name = "ruby-3.3"
	statuses := recordStatuses(t, cp, name)
	a, b := kit.StartOperator(t, cp, false), kit.StartOperator(t, cp, false)
	if err := c.Create(ctx, kit.RuntimeImage(name, "127.0.0.1:5000/runtimes/ruby@"+kit.DigestN(0))); err != nil {
		t.Fatal(err)
	}
	kit.Eventually(t, 30*time.Second, "generation 1", func() (bool, string) {
		ri := getRI(t, c, name)
		return caughtUp(ri) && ri.Status.Generation == 1, fmt.Sprintf("%+v", ri.Status)
	})
	const editors, editsEach = 3, 15
	wg := startEditors(t, c, name, "127.0.0.1:5000/runtimes/ruby", editors, editsEach, 30*time.Millisecond, nil)
	wg.Wait()
	kit.Eventually(t, 60*time.Second, "status caught up with the last edit", func() (bool, string) {
		ri := getRI(t, c, name)
		return caughtUp(ri), fmt.Sprintf("spec %s, status %+v", ri.Spec.Source.Image, ri.Status)
	})
	seq := checkSequence(t, statuses, getRI(t, c, name), kit.DigestN(0), editors*editsEach)
	t.Logf("two replicas, %d edits, %d generations observed", editors*editsEach, len(seq))
	a.Stop()
	b.Stop()
}

// startEditors rotates a RuntimeImage's digest from several goroutines at once, editor e
// pausing pause*(1+e/3) between edits, counting edits into edited when it is not nil.
func startEditors(t *testing.T, c client.Client, name, repo string, editors, each int, pause time.Duration, edited *atomic.Int64) *sync.WaitGroup {
	wg := &sync.WaitGroup{}
	for e := 0; e < editors; e++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				d := kit.DigestN(1000*(e+1) + i)
				kit.UpdateRI(t, c, name, func(ri *brewletv1.RuntimeImage) { ri.Spec.Source.Image = repo + "@" + d })
				if edited != nil {
					edited.Add(1)
				}
				time.Sleep(pause + pause*time.Duration(e)/3)
			}
		}()
	}
	return wg
}
