package shim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"brewlet.sh/brewlet/internal/artifact"
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
	if err := pruneVerdicts(dir, 10); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 10 || ents[0].Name() != "v02" {
		t.Fatalf("kept %d, first %s; want the 10 most recently used", len(ents), ents[0].Name())
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
