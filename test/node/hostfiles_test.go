package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brewlet.sh/brewlet/internal/provisioner/containerd"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
)

// A containerd config the administrator made 0600 stays 0600 when the agent adds the
// brewlet handler to it, and after a rollback (checked with containerd's own parser; the
// restart and health check are hooks here, TestContainerdHandlerRegistration runs them).
func TestContainerdConfigKeepsItsMode(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("version = 3\nroot = \""+filepath.Join(dir, "root")+"\"\nstate = \""+filepath.Join(dir, "state")+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	healthy := errors.New("the brewlet handler does not answer")
	cd := &containerd.Handler{ConfigPath: cfg, Binary: framework.Tool(t, "containerd"),
		Restart: func(context.Context) error { return nil },
		Health:  func(context.Context) error { return healthy }}
	mode := func() os.FileMode {
		fi, err := os.Stat(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	if _, err := cd.Ensure(context.Background()); vocab.ReasonOf(err) != vocab.ReasonContainerdConfigFailed {
		t.Fatalf("failed health check: %v", err)
	}
	if b, _ := os.ReadFile(cfg); strings.Contains(string(b), vocab.ShimRuntimeType) || mode() != 0o600 {
		t.Fatalf("after the rollback: mode %v, config:\n%s", mode(), b)
	}
	healthy = nil
	if _, err := cd.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(cfg); !strings.Contains(string(b), vocab.ShimRuntimeType) || mode() != 0o600 {
		t.Fatalf("after registration: mode %v, config:\n%s", mode(), b)
	}
}
