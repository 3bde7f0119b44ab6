package shim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brewlet.sh/brewlet/internal/vocab"
)

func TestProfileCreate(t *testing.T) {
	ctx := context.Background()
	t.Run("off unless asked", func(t *testing.T) {
		t.Setenv(vocab.EnvShimProfileDir, "")
		profileCreate(ctx, "c1")()
	})
	dir := filepath.Join(t.TempDir(), "profiles")
	t.Setenv(vocab.EnvShimProfileDir, dir)
	outer := profileCreate(ctx, "c1")
	// A create overlapping another in the same shim gets its allocations but no CPU profile.
	profileCreate(ctx, "../c2")()
	outer()
	got := map[string]bool{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
			t.Fatalf("%s is not a gzipped profile: %v", e.Name(), err)
		}
		if fi, _ := e.Info(); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %s", e.Name(), fi.Mode())
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(e.Name(), "create-"), "-")
		_, kind, _ := strings.Cut(e.Name(), ".")
		got[name+" "+kind] = true
	}
	for _, want := range []string{"c1 cpu.pprof", "c1 allocs-before.pprof", "c1 allocs.pprof", "container allocs-before.pprof", "container allocs.pprof"} {
		if !got[want] {
			t.Errorf("no %s; written: %v", want, got)
		}
	}
	if got["container cpu.pprof"] || len(got) != 5 {
		t.Errorf("unexpected profiles: %v", got)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("profile directory: %v %v", err, fi)
	}
}

func TestProfileName(t *testing.T) {
	for in, want := range map[string]string{
		"3f2a9c":                 "3f2a9c",
		"web_1.app-2":            "web_1.app-2",
		"":                       "container",
		"../etc":                 "container",
		"a/b":                    "container",
		strings.Repeat("a", 129): "container",
	} {
		if got := profileName(in); got != want {
			t.Errorf("profileName(%q) = %q, want %q", in, got, want)
		}
	}
}
