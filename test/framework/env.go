// Package framework starts real Kubernetes and containerd components for Brewlet's tests:
// etcd and kube-apiserver (optionally kube-controller-manager, kube-scheduler, kwok), and a
// node of containerd, runc, a loopback OCI registry and a private CNI bridge. Everything
// lives on private paths, ports, sockets, bridge and cgroup names, and is removed when the
// test ends, also on failure, interrupt or timeout (see Main and the janitor).
package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// TB is what the harness needs from its caller. A test's *testing.T satisfies it; so does
// the local cluster's command-line runner (test/cluster), which starts the same components
// outside a test.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Skipf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	Failed() bool
}

// InCI reports whether the tests run under CI, where a tier that cannot start its
// components is a failure, never a skip.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "0" && v != "false"
}

// Unavailable ends a test whose real components cannot run here: a failure under CI, a
// skip with the reason elsewhere.
func Unavailable(t TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("CI=true and a required component is unavailable: %s", msg)
	}
	t.Skipf("component unavailable (run 'make tools' as root): %s", msg)
}

// ToolsBin is the directory of the pinned tools built by hack/tools.sh.
func ToolsBin() string {
	if d := os.Getenv("BREWLET_TOOLS_BIN"); d != "" {
		return d
	}
	if c := os.Getenv("BREWLET_TOOLS_CACHE"); c != "" {
		return filepath.Join(c, "bin")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "brewlet-tools", "bin")
}

// Tool returns the path of a pinned tool, or ends the test as Unavailable.
func Tool(t TB, name string) string {
	t.Helper()
	p := filepath.Join(ToolsBin(), name)
	if _, err := os.Stat(p); err != nil {
		Unavailable(t, "tool %s not found in %s (build it with hack/tools.sh)", name, ToolsBin())
	}
	return p
}

// RequireRoot ends the test as Unavailable unless it runs as root.
func RequireRoot(t TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "node tests need root (containerd, runc, mounts, bridges)")
	}
}

// RepoRoot is the directory holding the project's go.mod.
func RepoRoot(t TB) string {
	t.Helper()
	if d := os.Getenv(RepoRootEnv); d != "" {
		return d // a guest without a Go toolchain (test/cgroupv2)
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		t.Fatalf("cannot locate the repository root (go env GOMOD): %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// RepoRootEnv names the repository root for a test binary that runs where no Go toolchain
// is (the cgroup v2 guest, test/cgroupv2).
const RepoRootEnv = "BREWLET_REPO_ROOT"

// PrebuiltEnv names a directory of binaries the harness would otherwise build with `go
// build` (the shim, the pause program, the CLI, test probes): the cgroup v2 guest has no Go
// toolchain, and links there would take minutes under emulation.
const PrebuiltEnv = "BREWLET_PREBUILT_BIN"

// Prebuilt returns the prebuilt binary name, or "" when there is no prebuilt directory.
func Prebuilt(name string) string {
	d := os.Getenv(PrebuiltEnv)
	if d == "" {
		return ""
	}
	return filepath.Join(d, name)
}

// copyFile copies a regular file to dst with mode, making dst's directory.
func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}
