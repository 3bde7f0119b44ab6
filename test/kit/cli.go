package kit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"brewlet.sh/brewlet/test/firsthour"
	"brewlet.sh/brewlet/test/framework"
)

// cli is cmd/brewlet as this test binary built it: once per process, in an instance that
// lives as long as the process (tests only run it).
var cli struct {
	sync.Mutex
	bin string
}

// BuildCLI returns the brewlet CLI of this tree, built on first use.
func BuildCLI(t *testing.T) string {
	t.Helper()
	cli.Lock()
	defer cli.Unlock()
	if cli.bin != "" {
		return cli.bin
	}
	if pre := framework.Prebuilt("brewlet"); pre != "" {
		cli.bin = pre
		return pre
	}
	in, err := framework.NewProcessInstance("cli")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(in.Dir, "brewlet")
	if err := firsthour.BuildCLI(context.Background(), framework.RepoRoot(t), bin); err != nil {
		t.Fatal(err)
	}
	cli.bin = bin
	return bin
}

func Brewlet(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	// The harness's registries serve TLS from the test process's authority, as a company
	// registry with a private CA does (credentials: the process's Docker config).
	cmd := exec.Command(bin, append(append([]string{}, args...), "--ca-file="+framework.RegistryCAFile(t))...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func LastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func WriteTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
