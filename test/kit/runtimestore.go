package kit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/test/firsthour"
	"brewlet.sh/brewlet/test/framework"
)

// ArtifactsEnv names a directory the suites of one run share their built artifacts in
// (make test creates one per run and removes it after). Without it each test binary keeps
// them in a directory of its own.
const ArtifactsEnv = "BREWLET_TEST_ARTIFACTS"

// runtimeStore keeps every set of runtime images hack/runtimes.sh built, in an OCI layout:
// each later registry gets the same images (same digests) by a copy of a second instead of
// a rebuild of ten or more (apt lookups, unpacking, compression). A set is keyed by its
// name and the script's own bytes, so a store outliving a change to the script is not
// read for it. Test binaries of one run share the store through ArtifactsEnv; a file lock
// orders them, a mutex the tests of one binary.
var runtimeStore struct {
	sync.Mutex
	dir string
}

// BuildRuntimes returns NAME -> REF@digest of hack/runtimes.sh's `which` images in registry.
func BuildRuntimes(t *testing.T, registry, which string) map[string]string {
	t.Helper()
	client := framework.RegistryClient(t)
	root := framework.RepoRoot(t)
	var refs map[string]string
	err := withRuntimeStore(func(store layout.Path, dir string) error {
		key, err := setKey(root, which)
		if err != nil {
			return err
		}
		setFile := filepath.Join(dir, "sets", key+".json")
		if b, err := os.ReadFile(setFile); err == nil {
			set := map[string]string{}
			if err := json.Unmarshal(b, &set); err != nil {
				return fmt.Errorf("read %s: %w", setFile, err)
			}
			refs, err = copyRuntimes(store, set, registry, client)
			return err
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		// The registry serves TLS from the process's authority and finds its credentials in
		// the process's Docker config (DOCKER_CONFIG, inherited).
		refs, err = firsthour.BuildRuntimes(context.Background(), root, registry, which, os.Stderr,
			"BREWLET_REGISTRY_CA_FILE="+framework.RegistryCAFile(t))
		if err != nil {
			return err
		}
		if err := keepRuntimes(store, refs, client); err != nil {
			return err
		}
		b, err := json.Marshal(refs)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(setFile), 0o755); err != nil {
			return err
		}
		// Written last and renamed into place: a set file names only images the layout holds.
		tmp := setFile + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, setFile)
	})
	if err != nil {
		t.Fatal(err)
	}
	return refs
}

// KeptRuntime is an image of a set BuildRuntimes built, by digest.
func KeptRuntime(t *testing.T, digest string) v1.Image {
	t.Helper()
	h, err := v1.NewHash(digest)
	if err != nil {
		t.Fatal(err)
	}
	var img v1.Image
	err = withRuntimeStore(func(store layout.Path, _ string) error {
		idx, err := store.ImageIndex()
		if err == nil {
			img, err = idx.Image(h)
		}
		return err
	})
	if err != nil {
		t.Fatalf("runtime image %s is not in the store: %v", digest, err)
	}
	return img
}

// withRuntimeStore runs f with the store locked against the other tests of this binary and
// the other binaries of the run.
func withRuntimeStore(f func(layout.Path, string) error) error {
	rs := &runtimeStore
	rs.Lock()
	defer rs.Unlock()
	if rs.dir == "" {
		if shared := os.Getenv(ArtifactsEnv); shared != "" {
			rs.dir = filepath.Join(shared, "runtime-images")
		} else {
			in, err := framework.NewProcessInstance("runtime-images")
			if err != nil {
				return err
			}
			rs.dir = in.Dir
		}
		if err := os.MkdirAll(rs.dir, 0o755); err != nil {
			return err
		}
	}
	lock, err := os.OpenFile(filepath.Join(rs.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = lock.Close() }() // closing drops the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	oci := filepath.Join(rs.dir, "oci")
	store, err := layout.FromPath(oci)
	if err != nil {
		if store, err = layout.Write(oci, empty.Index); err != nil {
			return err
		}
	}
	return f(store, rs.dir)
}

// setKey names a set by which and the bytes of the script that builds it.
func setKey(root, which string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "hack", "runtimes.sh"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return which + "-" + hex.EncodeToString(sum[:8]), nil
}

// keepRuntimes copies a freshly built set into the store.
func keepRuntimes(store layout.Path, refs map[string]string, client []remote.Option) error {
	for _, ref := range refs {
		d, err := name.NewDigest(ref, name.Insecure)
		if err != nil {
			return err
		}
		img, err := remote.Image(d, client...)
		if err != nil {
			return fmt.Errorf("keep %s: %w", ref, err)
		}
		// hack/runtimes.sh pushes single-platform images; an index would resolve to one
		// of its images here, under another digest.
		if got, err := img.Digest(); err != nil || got.String() != d.DigestStr() {
			return fmt.Errorf("keep %s: read back as %v (%v); only single images are kept", ref, got, err)
		}
		if err := store.AppendImage(img); err != nil {
			return fmt.Errorf("keep %s: %w", ref, err)
		}
	}
	return nil
}

// copyRuntimes pushes a kept set to another registry under the same repositories.
func copyRuntimes(store layout.Path, set map[string]string, registry string, client []remote.Option) (map[string]string, error) {
	idx, err := store.ImageIndex()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, ref := range set {
		repoRef, digest, ok := strings.Cut(ref, "@")
		if !ok {
			return nil, fmt.Errorf("kept reference %s has no digest", ref)
		}
		_, path, _ := strings.Cut(repoRef, "/")
		dst, err := name.NewDigest(registry+"/"+path+"@"+digest, name.Insecure)
		if err != nil {
			return nil, err
		}
		h, err := v1.NewHash(digest)
		if err != nil {
			return nil, err
		}
		img, err := idx.Image(h)
		if err == nil {
			err = remote.Write(dst, img, client...)
		}
		if err != nil {
			return nil, fmt.Errorf("copy %s: %w", ref, err)
		}
		out[k] = dst.String()
	}
	return out, nil
}
