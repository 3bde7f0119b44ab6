package framework

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
)

// HelmCommand is the pinned helm against kubeconfig with its configuration, cache and data
// below home, so that a test's releases and repositories never meet the user's or another
// test's.
func HelmCommand(ctx context.Context, t TB, home, kubeconfig string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, Tool(t, "helm"), append(args, "--kubeconfig", kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	return cmd
}
