// Package hoststate is the on-disk contract between the provisioner (which writes runtime
// generations, authorizations and the startup fence) and the shim (which reads them and
// writes per-container leases and exec state). It is the only thing the two share, so every
// path, file format and lock lives here.
package hoststate

import (
	"fmt"
	"path/filepath"
	"strconv"

	"brewlet.sh/brewlet/internal/vocab"
)

// Roots are the three roots of node state; their methods name the paths of each piece.
type Roots struct {
	Runtimes string // /opt/brewlet/runtimes: installed generations, current, authorization
	State    string // /var/lib/brewlet: layer cache, leases, exec state
	Run      string // /run/brewlet: startup fence (tmpfs: cleared by a reboot)
}

// Layout is where node state lives. Production uses DefaultLayout; tests use private roots.
// Each piece of state is a type of its own, in a file of its own, owning its files and
// formats; Layout composes them so that callers (the shim and the agent alike) reach every
// piece through one value. A piece that needs another goes through layout().
type Layout struct {
	Roots
	AuthorizationStore
	CacheLock
	FailedStarts
	FenceFiles
	GenerationStore
	HostRecordStore
	LaunchCounters
	LeaseStore
	InstallRequests
	UnusedStore
}

// NewLayout composes the pieces of state below roots.
func NewLayout(r Roots) Layout {
	return Layout{Roots: r, AuthorizationStore: AuthorizationStore{r}, CacheLock: CacheLock{r}, FailedStarts: FailedStarts{r}, FenceFiles: FenceFiles{r},
		GenerationStore: GenerationStore{r}, HostRecordStore: HostRecordStore{r}, LaunchCounters: LaunchCounters{r},
		LeaseStore: LeaseStore{r}, InstallRequests: InstallRequests{r}, UnusedStore: UnusedStore{r}}
}

// layout is the whole layout of the same roots, for a piece of state that uses another.
func (r Roots) layout() Layout { return NewLayout(r) }

// DefaultLayout is the production layout (docs/provisioner.md, "Host layout").
var DefaultLayout = NewLayout(Roots{Runtimes: "/opt/brewlet/runtimes", State: "/var/lib/brewlet", Run: "/run/brewlet"})

// Under returns a layout with all three roots below dir (tests, alternative prefixes).
func Under(dir string) Layout {
	return NewLayout(Roots{
		Runtimes: filepath.Join(dir, "opt/brewlet/runtimes"),
		State:    filepath.Join(dir, "var/lib/brewlet"),
		Run:      filepath.Join(dir, "run/brewlet"),
	})
}

// RuntimeDir holds every epoch and generation of one runtime ID.
func (l Roots) RuntimeDir(id string) string { return filepath.Join(l.Runtimes, id) }

// GenerationDir is one installed generation.
func (l Roots) GenerationDir(id, epoch string, generation int64) string {
	return filepath.Join(l.Runtimes, id, epoch, strconv.FormatInt(generation, 10))
}

// CurrentLink is the atomic pointer to the validated generation ("<epoch>/<generation>").
func (l Roots) CurrentLink(id string) string { return filepath.Join(l.Runtimes, id, "current") }

// AuthorizationFile is the node-local authorization of one runtime ID.
func (l Roots) AuthorizationFile(id string) string {
	return filepath.Join(l.Runtimes, id, "authorization")
}

// LockFile serializes "resolve current and take a lease" against garbage collection.
func (l Roots) LockFile(id string) string { return filepath.Join(l.Runtimes, id, ".lock") }

// LayerDir is one extracted layer of the content-addressed cache, by diff ID hex.
func (l Roots) LayerDir(diffIDHex string) string {
	return filepath.Join(l.State, "layers", diffIDHex)
}

// LeaseFile is the lease of one container on a generation.
func (l Roots) LeaseFile(containerID string) string {
	return filepath.Join(l.State, "leases", containerID+".json")
}

// ContainerDir holds a container's saved exec state.
func (l Roots) ContainerDir(containerID string) string {
	return filepath.Join(l.State, "containers", containerID)
}

// IDMapDir is where the shim attaches a user-namespaced container's idmapped layers for the
// moment its root filesystem is mounted (docs/shim.md, "User namespaces"); on the run tmpfs,
// so a reboot clears whatever a crash left.
func (l Roots) IDMapDir(containerID string) string {
	return filepath.Join(l.Run, "idmap", containerID)
}

// FenceFile closes the node to new containers while it exists.
func (l Roots) FenceFile() string { return filepath.Join(l.Run, "fence") }

// FenceCleared marks that the agent re-validated state since the last boot.
func (l Roots) FenceCleared() string { return filepath.Join(l.Run, "validated") }

// checkID refuses IDs and container IDs that could escape their directory.
func checkID(id string) error { return vocab.ValidateRuntimeID(id) }

func checkContainerID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("container ID %q has a bad length", id)
	}
	for _, c := range id {
		if (!isAlnum(c) && c != '-' && c != '_' && c != '.') || id == "." || id == ".." {
			return fmt.Errorf("container ID %q contains characters outside [A-Za-z0-9._-]", id)
		}
	}
	return nil
}

// checkEpoch accepts Kubernetes UIDs (and other plain tokens), never a path.
func checkEpoch(e string) error {
	if e == "" || len(e) > 64 {
		return fmt.Errorf("epoch %q has a bad length", e)
	}
	for _, c := range e {
		if !isAlnum(c) && c != '-' {
			return fmt.Errorf("epoch %q is not a UID", e)
		}
	}
	return nil
}

func isAlnum(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// LaunchesDir holds the shim's launch counters: one file per outcome and reason, grown by
// one byte per launch (an O_APPEND write of one byte is atomic), read by the agent's metrics.
func (l Roots) LaunchesDir() string { return filepath.Join(l.State, "launches") }
