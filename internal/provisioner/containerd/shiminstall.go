package containerd

import (
	"bytes"
	"os"
	"path/filepath"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// InstallShim copies the shim binary shipped in the agent's image onto the host, where
// containerd finds it by name, replacing it atomically only when its content differs.
func InstallShim(src, dir string) (bool, error) {
	want, err := os.ReadFile(src)
	if err != nil {
		return false, err
	}
	dst := filepath.Join(dir, vocab.ShimBinaryName)
	if have, err := os.ReadFile(dst); err == nil && bytes.Equal(have, want) {
		return false, nil
	}
	return true, hoststate.WriteFileAtomic(dst, want, 0o755)
}
