package firsthour

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildRuntimes runs hack/runtimes.sh in the repository root: it builds the local runtime
// images named by which (busybox, python or all) from Debian packages, pushes them to reg
// and returns NAME -> repo@sha256 (python1, python2, busybox). Its progress goes to progress. env is added to the script's
// environment: DOCKER_CONFIG and BREWLET_REGISTRY_CA_FILE for a registry serving TLS with
// a CA of its own and requiring credentials.
func BuildRuntimes(ctx context.Context, root, reg, which string, progress io.Writer, env ...string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "runtimes.sh"), reg, which)
	cmd.Dir, cmd.Stderr, cmd.Env = root, progress, append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("hack/runtimes.sh %s: %w\n%s", which, err, out)
	}
	refs := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && strings.Contains(v, "@sha256:") {
			refs[k] = v
		}
	}
	return refs, nil
}

// BuildCLI builds the brewlet CLI of the repository root into out.
func BuildCLI(ctx context.Context, root, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/brewlet")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the brewlet CLI: %w\n%s", err, b)
	}
	return nil
}
