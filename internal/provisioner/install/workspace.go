package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/hoststate"
)

// An install works in a workspace of its own, a directory ".tmp-install-*" in the layer
// cache (so a layer is renamed into place on the same filesystem, and garbage collection,
// which skips ".tmp-" names, leaves it alone). The workspace holds an exclusively flocked
// owner file for as long as the install runs: the kernel drops the lock when the process
// dies, so a workspace whose lock can be taken belongs to a killed install and is removed,
// and one whose lock is held is never touched, whichever process or goroutine holds it.
const (
	workspacePrefix = ".tmp-install-"
	ownerFile       = "owner.lock"
	// staleUnlocked is how old a ".tmp-" entry without an owner file must be before it is
	// removed: such entries are left by older versions, or are a workspace in the instant
	// between its creation and its lock.
	staleUnlocked = 10 * time.Minute
)

type workspace struct {
	dir   string
	owner *os.File
}

// newWorkspace creates and locks a workspace under root.
func newWorkspace(root string) (*workspace, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	// The owner locks live below root: nobody but root may create entries there.
	if err := hoststate.CheckPrivateDir(root); err != nil {
		return nil, err
	}
	for range 3 {
		dir, err := os.MkdirTemp(root, workspacePrefix)
		if err != nil {
			return nil, err
		}
		f, err := os.OpenFile(filepath.Join(dir, ownerFile), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		// Another install's collection may have opened the owner file between its creation
		// and this lock, taken it and be removing the directory: then start over.
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			_ = f.Close()
			continue
		}
		_, _ = f.WriteString(strconv.Itoa(os.Getpid()) + "\n") // for whoever inspects the node
		return &workspace{dir: dir, owner: f}, nil
	}
	return nil, fmt.Errorf("could not take a workspace in %s", root)
}

// Close removes the workspace, still holding its lock so no collection races the removal.
func (w *workspace) Close() error {
	err := os.RemoveAll(w.dir)
	_ = w.owner.Close()
	return err
}

// collectStale removes the workspaces of killed installs under root, and ".tmp-" entries
// without an owner (older versions' temporary layer directories) once they are old. It
// returns what it removed. Errors are not fatal to an install: a leftover only costs disk.
func collectStale(root string, now time.Time) []string {
	if hoststate.CheckPrivateDir(root) != nil {
		return nil // newWorkspace refuses the install, saying why
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		if !strings.Contains(e.Name(), ".tmp-") {
			continue
		}
		p := filepath.Join(root, e.Name())
		f, err := os.OpenFile(filepath.Join(p, ownerFile), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		switch {
		case err == nil:
			if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil && os.RemoveAll(p) == nil {
				removed = append(removed, e.Name())
			}
			_ = f.Close() // releases the lock
		case errors.Is(err, fs.ErrNotExist):
			if fi, err := os.Lstat(p); err == nil && now.Sub(fi.ModTime()) > staleUnlocked && os.RemoveAll(p) == nil {
				removed = append(removed, e.Name())
			}
		}
	}
	return removed
}

// fsyncDir makes a directory's entries (creations, renames) durable.
func fsyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	return f.Sync()
}
