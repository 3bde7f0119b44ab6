package hoststate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Installs share the layer cache; GC excludes them, without waiting or after waiting.
func TestLayerCacheLock(t *testing.T) {
	l := Under(t.TempDir())
	ctx := context.Background()
	in1, err := l.LockLayerCache(ctx, false, true)
	if err != nil {
		t.Fatal(err)
	}
	in2, err := l.LockLayerCache(ctx, false, false)
	if err != nil {
		t.Fatalf("two installs at once: %v", err)
	}
	if _, err := l.LockLayerCache(ctx, true, false); !errors.Is(err, ErrLayerCacheBusy) {
		t.Fatalf("GC during installs: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := l.LockLayerCache(short, true, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting GC did not honour its context: %v", err)
	}
	in1()
	in2()
	gc, err := l.LockLayerCache(ctx, true, false)
	if err != nil {
		t.Fatalf("GC after the installs: %v", err)
	}
	if _, err := l.LockLayerCache(ctx, false, false); !errors.Is(err, ErrLayerCacheBusy) {
		t.Fatalf("install during GC: %v", err)
	}
	gc()
}

// A host file keeps the mode it had when Brewlet rewrites it; a new one gets the default.
func TestReplaceFileKeepsMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(p, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceFile(p, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode after rewrite: %v %v", fi.Mode(), err)
	}
	n := filepath.Join(dir, "new.toml")
	if err := ReplaceFile(n, []byte("c"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(n); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode of a new file: %v %v", fi.Mode(), err)
	}
}
