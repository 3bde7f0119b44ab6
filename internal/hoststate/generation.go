package hoststate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"brewlet.sh/brewlet/internal/vocab"
)

// GenerationStore is the installed generations of each runtime ID and its current pointer.
// Its methods are promoted to Layout.
type GenerationStore struct{ Roots }

// Generation is the immutable metadata of one installed generation. Its root filesystem
// is the ordered list of cached layers (lowest first), shared with other generations.
type Generation struct {
	ID         string   `json:"id"`
	Epoch      string   `json:"epoch"`
	Generation int64    `json:"generation"`
	Digest     string   `json:"digest"`   // manifest digest the RuntimeImage names
	Platform   string   `json:"platform"` // os/arch[/variant]
	Env        []string `json:"env,omitempty"`
	UID        int64    `json:"uid"`
	GID        int64    `json:"gid"`
	Home       string   `json:"home,omitempty"` // from the account files
	HasPath    bool     `json:"hasPath"`
	Path       string   `json:"path,omitempty"`
	Layers     []string `json:"layers"` // diff IDs (sha256:<hex>), lowest first
	// SignedUnder is the fingerprint of the signature requirements the digest was verified
	// under at install ("": none were required). A later generation of the same digest
	// (a rollback) reuses this one's layers without asking a registry when the
	// requirements have not changed since.
	SignedUnder string `json:"signedUnder,omitempty"`
}

const metadataFile = "metadata.json"

// Ref is an epoch and generation, the target of a current pointer.
type Ref struct {
	Epoch      string
	Generation int64
}

func (r Ref) String() string { return r.Epoch + "/" + strconv.FormatInt(r.Generation, 10) }

// WriteGeneration records a generation's metadata and makes its directory read-only. The
// layers must already be in the cache.
func (l GenerationStore) WriteGeneration(g Generation) error {
	if err := checkID(g.ID); err != nil {
		return err
	}
	if err := checkEpoch(g.Epoch); err != nil || g.Generation < 1 {
		return fmt.Errorf("bad generation reference %q/%d: %v", g.Epoch, g.Generation, err)
	}
	dir := l.GenerationDir(g.ID, g.Epoch, g.Generation)
	if err := writeJSON(filepath.Join(dir, metadataFile), g); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(dir, metadataFile), 0o444); err != nil {
		return err
	}
	return os.Chmod(dir, 0o555)
}

// ReadGeneration reads an installed generation's metadata.
func (l GenerationStore) ReadGeneration(id string, r Ref) (Generation, error) {
	var g Generation
	if err := checkID(id); err != nil {
		return g, err
	}
	if err := checkEpoch(r.Epoch); err != nil {
		return g, err
	}
	err := readJSON(filepath.Join(l.GenerationDir(id, r.Epoch, r.Generation), metadataFile), &g)
	if err != nil {
		return g, err
	}
	if g.ID != id || g.Epoch != r.Epoch || g.Generation != r.Generation {
		return g, fmt.Errorf("metadata of %s/%s says %s/%s/%d", id, r, g.ID, g.Epoch, g.Generation)
	}
	return g, nil
}

// SetCurrent flips the current pointer atomically (a new symlink renamed over the old).
func (l GenerationStore) SetCurrent(id string, r Ref) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := checkEpoch(r.Epoch); err != nil || r.Generation < 1 {
		return fmt.Errorf("bad current target %s: %v", r, err)
	}
	link := l.CurrentLink(id)
	tmp := link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(r.String(), tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}

// Current returns the validated generation of a runtime ID.
func (l GenerationStore) Current(id string) (Ref, error) {
	if err := checkID(id); err != nil {
		return Ref{}, err
	}
	target, err := os.Readlink(l.CurrentLink(id))
	if errors.Is(err, fs.ErrNotExist) {
		return Ref{}, vocab.Errorf(vocab.ReasonRuntimeImageNotInstalled, "runtime image %q has no validated generation on this node yet", id)
	}
	if err != nil {
		return Ref{}, err
	}
	epoch, gen, ok := strings.Cut(target, "/")
	n, perr := strconv.ParseInt(gen, 10, 64)
	if !ok || perr != nil || n < 1 || checkEpoch(epoch) != nil {
		return Ref{}, fmt.Errorf("current pointer of %q is %q, not <epoch>/<generation>", id, target)
	}
	return Ref{Epoch: epoch, Generation: n}, nil
}

// RuntimeIDs lists the runtime IDs that have state on the node.
func (l GenerationStore) RuntimeIDs() ([]string, error) {
	ents, err := os.ReadDir(l.Runtimes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && checkID(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	return out, err
}

// Generations lists the installed generations of a runtime ID, of every epoch.
func (l GenerationStore) Generations(id string) ([]Ref, error) {
	epochs, err := os.ReadDir(l.RuntimeDir(id))
	if err != nil {
		return nil, err
	}
	var out []Ref
	for _, e := range epochs {
		if !e.IsDir() || checkEpoch(e.Name()) != nil {
			continue
		}
		gens, err := os.ReadDir(filepath.Join(l.RuntimeDir(id), e.Name()))
		if err != nil {
			return nil, err
		}
		for _, g := range gens {
			if n, err := strconv.ParseInt(g.Name(), 10, 64); err == nil && n > 0 {
				out = append(out, Ref{Epoch: e.Name(), Generation: n})
			}
		}
	}
	return out, nil
}
