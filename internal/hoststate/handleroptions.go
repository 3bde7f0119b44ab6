package hoststate

import (
	"fmt"
	"os"
	"path/filepath"
)

// maxHandlerOptions bounds the runc options file: a handful of TOML keys.
const maxHandlerOptions = 64 << 10

// HandlerOptionsFile holds the runc options of the brewlet handler (BinaryName, Root,
// SystemdCgroup, …) as a TOML table, copied by the agent from the node's runc handler.
// containerd's CRI hands a handler whose runtime_type is not io.containerd.runc.v2 its
// options table as opaque TOML and then cannot give a user-namespaced container the I/O
// owner it needs, so the brewlet handler carries no table and the shim reads its runc
// options here (docs/provisioner.md, "The handler").
func (r Roots) HandlerOptionsFile() string {
	return filepath.Join(r.State, "host", "runc-options.toml")
}

// WriteHandlerOptions replaces the file atomically.
func (r Roots) WriteHandlerOptions(b []byte) error {
	if len(b) > maxHandlerOptions {
		return fmt.Errorf("runc options for the brewlet handler are %d bytes, more than %d", len(b), maxHandlerOptions)
	}
	if err := os.MkdirAll(filepath.Dir(r.HandlerOptionsFile()), 0o755); err != nil {
		return err
	}
	return WriteFileAtomic(r.HandlerOptionsFile(), b, 0o644)
}

// ReadHandlerOptions reads the file; a missing one is nil (runc's defaults).
func (r Roots) ReadHandlerOptions() ([]byte, error) {
	return readBounded(r.HandlerOptionsFile(), maxHandlerOptions)
}
