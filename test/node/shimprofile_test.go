package node

import (
	"bytes"
	"cmp"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
)

// BREWLET_SHIM_PROFILE_DIR on a real node: each application container's create leaves a
// CPU profile and its allocation profiles. The image step's time of each create is logged:
// the first create of the image reads its blobs, the later ones answer from the node's
// image verdicts. BREWLET_E2E_PROFILE_DIR keeps the profiles there for reading.
func TestDataPathShimProfiles(t *testing.T) {
	dir := cmp.Or(os.Getenv("BREWLET_E2E_PROFILE_DIR"), filepath.Join(t.TempDir(), "profiles"))
	n := framework.StartNodeWith(t, framework.NodeOptions{ShimEnv: []string{
		vocab.EnvShimProfileDir + "=" + dir, vocab.EnvSlowLaunch + "=0s"}})
	d := newDataPathOn(t, n)
	var cids []string
	for range 3 {
		cid, _, err := d.Start(t, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		cids = append(cids, cid)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
			t.Fatalf("%s is not a gzipped profile: %v", e.Name(), err)
		}
		for _, cid := range cids {
			if strings.HasPrefix(e.Name(), "create-"+cid+"-") {
				_, kind, _ := strings.Cut(e.Name(), ".")
				kinds[kind]++
			}
		}
	}
	for _, k := range []string{"cpu.pprof", "allocs-before.pprof", "allocs.pprof"} {
		if kinds[k] != len(cids) {
			t.Errorf("%d %s profiles for %d creates: %v", kinds[k], k, len(cids), kinds)
		}
	}
	logged, err := os.ReadFile(n.Containerd.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	step := regexp.MustCompile(`slow launch: .* image=(\S+) .* lease=(\S+) .*container=([0-9a-f]+)`)
	for _, line := range strings.Split(string(logged), "\n") {
		if m := step.FindStringSubmatch(line); m != nil {
			for i, cid := range cids {
				if m[3] == cid {
					t.Logf("create %d: image step %s, lease step %s", i+1, m[1], m[2])
				}
			}
		}
	}
}
