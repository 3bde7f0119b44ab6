package containerd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// hostPath is the search path for the node's own programs: containerd and the restart
// command's shell are the host's, never the agent image's (which carries neither).
var hostPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// HostExec runs programs for containerd mode validated. With Root set (the node's root
// filesystem as mounted into the agent's pod, the chart's /host), a program runs chrooted
// into it: `containerd config dump` is parsed by the same containerd build that will load
// the config, and the restart command runs with the node's shell and init tools
// (systemctl reaches systemd through the host's /run). With Root empty, programs run in the
// agent's own filesystem (an agent on the host, or an image that carries them).
type HostExec struct {
	Root string
}

// Command is exec.CommandContext for a program of the node. A bare name is looked up in
// the node's standard directories below Root (exec.LookPath would search the agent's).
func (h HostExec) Command(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	if h.Root == "" {
		return exec.CommandContext(ctx, name, args...), nil
	}
	path, err := h.lookPath(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: h.Root}
	cmd.Dir = "/"
	// The agent's environment names its pod's paths; the node's programs get the node's.
	cmd.Env = []string{"PATH=" + strings.Join(hostPath, ":"), "LANG=C"}
	return cmd, nil
}

// Shell runs script with the node's sh.
func (h HostExec) Shell(ctx context.Context, script string) (*exec.Cmd, error) {
	return h.Command(ctx, "sh", "-c", script)
}

// lookPath resolves name as the node would. Only presence is checked: a symlink in the
// node's tree is resolved by the kernel inside the chroot, not here.
func (h HostExec) lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			return "", fmt.Errorf("%q: a program of the node is named by an absolute path or a bare name", name)
		}
		if _, err := os.Lstat(filepath.Join(h.Root, name)); err != nil {
			return "", fmt.Errorf("%s not found in the node's root filesystem (%s): %w", name, h.Root, err)
		}
		return filepath.Clean(name), nil
	}
	for _, dir := range hostPath {
		if fi, err := os.Lstat(filepath.Join(h.Root, dir, name)); err == nil && !fi.IsDir() {
			return filepath.Join(dir, name), nil
		}
	}
	return "", fmt.Errorf("%s not found on the node (looked in %s below %s); give its absolute path", name, strings.Join(hostPath, ":"), h.Root)
}
