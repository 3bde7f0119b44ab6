package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/test/firsthour"
	"brewlet.sh/brewlet/test/framework"
)

// runtimeImages keeps every set of runtime images hack/runtimes.sh built in this test
// binary, in an OCI layout of a process-lived instance: each later node's registry gets
// the same images (same digests) by a copy of a second instead of a rebuild of ten or more
// (apt lookups, unpacking, compression). The first build of a set still runs in every run.
var runtimeImages struct {
	sync.Mutex
	store layout.Path
	sets  map[string]map[string]string // which -> NAME -> REPO@digest as first pushed
}

// buildRuntimes returns NAME -> REF@digest of hack/runtimes.sh's `which` images in registry.
func buildRuntimes(t *testing.T, registry, which string) map[string]string {
	t.Helper()
	ri := &runtimeImages
	ri.Lock()
	defer ri.Unlock()
	client := framework.RegistryClient(t)
	if set, ok := ri.sets[which]; ok {
		refs, err := copyRuntimes(ri.store, set, registry, client)
		if err != nil {
			t.Fatal(err)
		}
		return refs
	}
	// The registry serves TLS from the process's authority and finds its credentials in the
	// process's Docker config (DOCKER_CONFIG, inherited).
	refs, err := firsthour.BuildRuntimes(context.Background(), framework.RepoRoot(t), registry, which, os.Stderr,
		"BREWLET_REGISTRY_CA_FILE="+framework.RegistryCAFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := keepRuntimes(which, refs, client); err != nil {
		t.Fatal(err)
	}
	return refs
}

// keepRuntimes copies a freshly built set into the store (called under the lock).
func keepRuntimes(which string, refs map[string]string, client []remote.Option) error {
	ri := &runtimeImages
	if ri.sets == nil {
		in, err := framework.NewProcessInstance("runtime-images")
		if err != nil {
			return err
		}
		if ri.store, err = layout.Write(filepath.Join(in.Dir, "oci"), empty.Index); err != nil {
			return err
		}
		ri.sets = map[string]map[string]string{}
	}
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
		if err := ri.store.AppendImage(img); err != nil {
			return fmt.Errorf("keep %s: %w", ref, err)
		}
	}
	ri.sets[which] = refs
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
