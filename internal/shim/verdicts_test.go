package shim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// appLayer writes an unpacked application layer holding app/<name> with mode.
func appLayer(t *testing.T, parent, name string, mode os.FileMode) string {
	t.Helper()
	d := filepath.Join(parent, name+"-layer")
	if err := os.MkdirAll(filepath.Join(d, "app", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d, "app", "sub", name)
	if err := os.WriteFile(p, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestLayerSetKey(t *testing.T) {
	base := t.TempDir()
	a, b := appLayer(t, base, "a", 0o644), appLayer(t, base, "b", 0o644)
	lim := artifact.DefaultLimits()
	key := func(dirs ...string) string {
		k, err := layerSetKey(dirs, lim)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	ab := key(a, b)
	if key(a, b) != ab {
		t.Fatal("key is not stable")
	}
	if key(b, a) == ab || key(a) == ab {
		t.Fatal("order and membership must change the key")
	}
	if k, _ := layerSetKey([]string{a, b}, artifact.Limits{Entries: 10, PathBytes: 10}); k == ab {
		t.Fatal("limits must change the key")
	}
	// containerd reuses a snapshot path after its state is wiped: same path, new directory.
	if err := os.RemoveAll(b); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a new birth (or change) time even on coarse clocks
	appLayer(t, base, "b", 0o644)
	if key(a, b) == ab {
		t.Fatal("a directory recreated at the same path kept its key")
	}
	if _, err := layerSetKey([]string{filepath.Join(base, "missing")}, lim); err == nil {
		t.Fatal("missing layer directory gave a key")
	}
}

func TestCachedValidation(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	cache := filepath.Join(base, "verdicts")
	lim := artifact.DefaultLimits()

	good := appLayer(t, base, "good", 0o644)
	if err := cachedValidation(ctx, cache, []string{good}, lim); err != nil {
		t.Fatal(err)
	}
	// Changing a file deep in the layer keeps the directory's identity: the answer now
	// comes from the cache (snapshots are immutable; this proves the cache is used).
	if err := os.Chmod(filepath.Join(good, "app", "sub", "good"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cachedValidation(ctx, cache, []string{good}, lim); err != nil {
		t.Fatalf("cached acceptance not used: %v", err)
	}

	bad := appLayer(t, base, "bad", 0o600)
	first := cachedValidation(ctx, cache, []string{bad}, lim)
	if vocab.ReasonOf(first) != vocab.ReasonLayerPathViolation {
		t.Fatalf("got %v", first)
	}
	if err := os.Chmod(filepath.Join(bad, "app", "sub", "bad"), 0o644); err != nil {
		t.Fatal(err)
	}
	again := cachedValidation(ctx, cache, []string{bad}, lim)
	var ve *vocab.Error
	if !errors.As(again, &ve) || ve.Reason != vocab.ReasonLayerPathViolation || again.Error() != first.Error() {
		t.Fatalf("cached refusal %v differs from the first %v", again, first)
	}

	// Running out of time is not a property of the layers: not remembered.
	slow := appLayer(t, base, "slow", 0o644)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := cachedValidation(cancelled, cache, []string{slow}, lim); vocab.ReasonOf(err) != vocab.ReasonLimitExceeded {
		t.Fatalf("got %v", err)
	}
	if err := cachedValidation(ctx, cache, []string{slow}, lim); err != nil {
		t.Fatalf("deadline refusal was remembered: %v", err)
	}

	// A damaged verdict file is ignored: validated again, the layer is refused now (its
	// file has been 0600 since the cache answered above).
	key, _ := layerSetKey([]string{good}, lim)
	if err := os.WriteFile(filepath.Join(cache, key), []byte(`{"ok":true,"reason":"X"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cachedValidation(ctx, cache, []string{good}, lim); vocab.ReasonOf(err) != vocab.ReasonLayerPathViolation {
		t.Fatalf("damaged verdict was trusted: %v", err)
	}
}

// Twenty shims creating containers of the same layer set at once: one validates, the
// others wait and read its verdict.
func TestOneValidationPerLayerSet(t *testing.T) {
	base := t.TempDir()
	cache := filepath.Join(base, "verdicts")
	layer := appLayer(t, base, "app", 0o644)
	var calls atomic.Int32
	validateLayers = func(ctx context.Context, dirs, names []string, lim artifact.Limits) error {
		calls.Add(1)
		time.Sleep(200 * time.Millisecond) // long enough for every create to arrive meanwhile
		return artifact.ValidateDirLayers(ctx, dirs, names, lim)
	}
	t.Cleanup(func() { validateLayers = artifact.ValidateDirLayers })
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			errs[i] = cachedValidation(context.Background(), cache, []string{layer}, artifact.DefaultLimits())
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("create %d: %v", i, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d validations of one layer set, want 1", n)
	}
}

// A validation that runs out of time is remembered for a while, with a backoff that doubles,
// so that a hostile layer set does not cost every replica the whole deadline; after the
// backoff it is validated again.
func TestDeadlineRefusalsBackOff(t *testing.T) {
	base := t.TempDir()
	cache := filepath.Join(base, "verdicts")
	layer := appLayer(t, base, "huge", 0o644)
	lim := artifact.DefaultLimits()
	var calls atomic.Int32
	validateLayers = func(ctx context.Context, dirs, names []string, lim artifact.Limits) error {
		calls.Add(1)
		<-ctx.Done()
		return vocab.Wrap(vocab.ReasonLimitExceeded, ctx.Err(), "app layer 1: validation stopped after the deadline")
	}
	validationTimeout = 10 * time.Millisecond
	t.Cleanup(func() { validateLayers, validationTimeout = artifact.ValidateDirLayers, appValidationTimeout })

	first := cachedValidation(context.Background(), cache, []string{layer}, lim)
	if vocab.ReasonOf(first) != vocab.ReasonLimitExceeded || !strings.Contains(first.Error(), "tried again after") {
		t.Fatalf("first: %v", first)
	}
	again := cachedValidation(context.Background(), cache, []string{layer}, lim)
	if again == nil || again.Error() != first.Error() || calls.Load() != 1 {
		t.Fatalf("within the backoff: %v after %d validations, want the remembered refusal after 1", again, calls.Load())
	}
	// The backoff has passed: validated again, timed out again, the backoff doubled.
	key, _ := layerSetKey([]string{layer}, lim)
	v, _ := readVerdict(filepath.Join(cache, key))
	past := time.Now().Add(-time.Second)
	v.RetryAt = &past
	if err := storeVerdict(cache, filepath.Join(cache, key), v); err != nil {
		t.Fatal(err)
	}
	_ = cachedValidation(context.Background(), cache, []string{layer}, lim)
	v2, _ := readVerdict(filepath.Join(cache, key))
	if calls.Load() != 2 || v2.Timeouts != 2 {
		t.Fatalf("after the backoff: %d validations, verdict %+v", calls.Load(), v2)
	}
	// The caller giving up is not the layers' fault: nothing remembered.
	other := appLayer(t, base, "other", 0o644)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_ = cachedValidation(gone, cache, []string{other}, lim)
	okey, _ := layerSetKey([]string{other}, lim)
	if _, ok := readVerdict(filepath.Join(cache, okey)); ok {
		t.Fatal("a cancelled create left a verdict")
	}
}

func TestTimedOutBackoff(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	err := vocab.Errorf(vocab.ReasonLimitExceeded, "app layer 1: stopped")
	var prev verdict
	for _, want := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute} {
		v := timedOut(err, prev, now)
		if got := v.RetryAt.Sub(now); got != want || v.Timeouts != prev.Timeouts+1 {
			t.Fatalf("after %d timeouts: retry in %s, want %s", v.Timeouts, got, want)
		}
		if _, ok := parseVerdict(strings.NewReader(mustJSON(t, v))); !ok {
			t.Fatalf("verdict %+v does not read back", v)
		}
		prev = v
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestVerdictOf(t *testing.T) {
	refusal := vocab.Errorf(vocab.ReasonLayerPathViolation, "app layer 1 entry %q: setuid/setgid", "app/su")
	deadline := vocab.Wrap(vocab.ReasonLimitExceeded, context.DeadlineExceeded, "stopped")
	for _, tc := range []struct {
		name string
		err  error
		want verdict
		keep bool
	}{
		{"accepted", nil, verdict{OK: true}, true},
		{"refused", refusal, verdict{Reason: vocab.ReasonLayerPathViolation, Message: `app layer 1 entry "app/su": setuid/setgid`}, true},
		{"refused with more", fmt.Errorf("%w (and 2 more violations)", refusal),
			verdict{Reason: vocab.ReasonLayerPathViolation, Message: `app layer 1 entry "app/su": setuid/setgid (and 2 more violations)`}, true},
		{"too large", vocab.Errorf(vocab.ReasonLimitExceeded, "too many"), verdict{Reason: vocab.ReasonLimitExceeded, Message: "too many"}, true},
		{"deadline", deadline, verdict{}, false},
		{"i/o error", errors.New("read: EIO"), verdict{}, false},
	} {
		got, keep := verdictOf(tc.err)
		if got != tc.want || keep != tc.keep {
			t.Errorf("%s: got %+v %v", tc.name, got, keep)
		}
		if keep && tc.err != nil && got.err().Error() != tc.err.Error() {
			t.Errorf("%s: replayed %q, first %q", tc.name, got.err(), tc.err)
		}
	}
}

func TestPruneVerdicts(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for i := range 12 {
		p := filepath.Join(dir, fmt.Sprintf("v%02d", i))
		if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := old.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	// Validation locks go with their verdicts; a lock without a verdict too, unless held.
	for _, name := range []string{"v00.lock", "v11.lock", "orphan.lock", "held.lock"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	release, err := hoststate.LockExclusive(context.Background(), filepath.Join(dir, "held.lock"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := pruneVerdicts(dir, 10); err != nil {
		t.Fatal(err)
	}
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := []string{"held.lock", "v02", "v03", "v04", "v05", "v06", "v07", "v08", "v09", "v10", "v11", "v11.lock"}
	if !slices.Equal(names, want) {
		t.Fatalf("kept %v, want %v", names, want)
	}
}

// FuzzParseVerdict: a verdict file read back is either no verdict or exactly one of an
// acceptance and a typed refusal.
func FuzzParseVerdict(f *testing.F) {
	for _, s := range []string{`{"ok":true}`, `{"reason":"LayerPathViolation","message":"m"}`, `{}`, `{"ok":true,"reason":"X"}`, `{"ok":true,"extra":1}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, ok := parseVerdict(bytes.NewReader(b))
		if !ok {
			return
		}
		err := v.err()
		if v.OK != (err == nil) || (err != nil && vocab.ReasonOf(err) != v.Reason) {
			t.Fatalf("verdict %+v replays as %v", v, err)
		}
	})
}

// A pass verdict skips validation: only a file root alone could have written answers.
func TestPlantedVerdictIsNotRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "verdicts")
	file := filepath.Join(dir, "set")
	if err := storeVerdict(dir, file, verdict{OK: true}); err != nil {
		t.Fatal(err)
	}
	if v, ok := readVerdict(file); !ok || !v.OK {
		t.Fatalf("the shim's own verdict was not read: %+v %v", v, ok)
	}
	if err := os.Chmod(file, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, ok := readVerdict(file); ok {
		t.Fatal("a verdict file others can write answered")
	}
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, ok := readVerdict(file); ok {
		t.Fatal("a verdict in a directory others can write answered")
	}
}

// Distinct layer sets arriving at once are validated at most validationSlots at a time on
// the node; every one is still validated. With every slot held for longer than a shim
// waits, the create is refused LimitExceeded and nothing is remembered: the next try
// validates.
func TestValidationsOfDistinctSetsAreBounded(t *testing.T) {
	base := t.TempDir()
	cache := filepath.Join(base, "verdicts")
	var running, most, calls atomic.Int32
	validateLayers = func(ctx context.Context, dirs, names []string, lim artifact.Limits) error {
		calls.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(100 * time.Millisecond)
		return artifact.ValidateDirLayers(ctx, dirs, names, lim)
	}
	validationSlots = 2
	t.Cleanup(func() {
		validateLayers, validationSlots, slotWait = artifact.ValidateDirLayers, min(max(runtime.NumCPU()/2, 2), 8), appSlotWait
	})
	layers := make([]string, 8)
	for i := range layers {
		layers[i] = appLayer(t, base, fmt.Sprintf("app-%d", i), 0o644)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(layers))
	for i := range layers {
		wg.Go(func() {
			errs[i] = cachedValidation(context.Background(), cache, []string{layers[i]}, artifact.DefaultLimits())
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("create %d: %v", i, err)
		}
	}
	if calls.Load() != int32(len(layers)) || most.Load() > 2 || most.Load() < 1 {
		t.Fatalf("%d validations, at most %d at once; want %d, at most 2", calls.Load(), most.Load(), len(layers))
	}

	// Every slot held elsewhere (another shim's long validation) past the wait.
	slotWait = 200 * time.Millisecond
	var held []func()
	for range validationSlots {
		release, err := hoststate.TakeSlot(context.Background(), slotsDir(cache), validationSlots, 0, "test")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	fresh := appLayer(t, base, "fresh", 0o644)
	before := calls.Load()
	err := cachedValidation(context.Background(), cache, []string{fresh}, artifact.DefaultLimits())
	if vocab.ReasonOf(err) != vocab.ReasonLimitExceeded || !strings.Contains(err.Error(), "slots") || calls.Load() != before {
		t.Fatalf("with every slot held: %v after %d validations", err, calls.Load()-before)
	}
	key, _ := layerSetKey([]string{fresh}, artifact.DefaultLimits())
	if _, ok := readVerdict(filepath.Join(cache, key)); ok {
		t.Fatal("a busy node's refusal was remembered as the layers' verdict")
	}
	held[0]()
	if err := cachedValidation(context.Background(), cache, []string{fresh}, artifact.DefaultLimits()); err != nil || calls.Load() != before+1 {
		t.Fatalf("a slot freed: %v after %d validations", err, calls.Load()-before)
	}
	for _, release := range held[1:] {
		release()
	}
}
