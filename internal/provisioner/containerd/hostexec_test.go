package containerd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brewlet.sh/brewlet/internal/testutil"
)

func TestHostExecLookPath(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"usr/bin/containerd", "usr/local/bin/containerd", "bin/sh", "sbin/dironly/x"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/usr/bin/containerd", filepath.Join(root, "usr/bin/ctr-link")); err != nil {
		t.Fatal(err)
	}
	h := HostExec{Root: root}
	for _, tc := range []struct{ name, want, err string }{
		{"containerd", "/usr/local/bin/containerd", ""}, // the node's PATH order
		{"/usr/bin/containerd", "/usr/bin/containerd", ""},
		{"ctr-link", "/usr/bin/ctr-link", ""}, // a symlink is the kernel's to resolve
		{"/bin/../bin/sh", "/bin/sh", ""},
		{"dironly", "", "not found on the node"}, // a directory is no program
		{"missing", "", "not found on the node"},
		{"/opt/missing", "", "not found in the node's root filesystem"},
		{"bin/sh", "", "absolute path or a bare name"},
	} {
		got, err := h.lookPath(tc.name)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("lookPath(%q) = %q, %v; want an error with %q", tc.name, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("lookPath(%q) = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// A program of the node runs chrooted into its root filesystem: the node's shell, at /,
// with the node's PATH, never seeing the agent's files.
func TestHostExecRunsInTheNodesRoot(t *testing.T) {
	testutil.RequireRoot(t, "host programs run chrooted")
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("a static /bin/busybox stands in for the node's shell (Debian busybox-static): %v", err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), busybox, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"sh", "ls", "echo"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "node-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := HostExec{Root: root}
	cmd, err := h.Shell(context.Background(), `echo "$PATH"; pwd; ls /`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n/\nbin\nnode-file\n"
	if string(out) != want {
		t.Fatalf("the node's shell printed %q, want %q", out, want)
	}
	// A bare name is the node's: ls resolves to its /bin/ls.
	cmd, err = h.Command(context.Background(), "ls", "/bin")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "busybox") {
		t.Fatalf("ls /bin in the node's root: %v: %s", err, out)
	}
	// Failing commands report their exit status.
	cmd, _ = h.Shell(context.Background(), "exit 3")
	if err := cmd.Run(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("exit 3: %v", err)
	}
}
