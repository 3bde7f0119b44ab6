package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The local runtimes are real: built from Debian packages by hack/runtimes.sh, pushed to
// a real registry; the two generations of each runtime (Debian's release version and its
// security update) share their base layer and differ in the runtime's own packages and the
// metadata layer, and the interpreter runs from the image's root filesystem.
func TestLocalRuntimes(t *testing.T) {
	framework.RequireRoot(t)
	reg := framework.StartRegistry(t)
	refs := kit.BuildRuntimes(t, reg.Addr, "all")
	for _, k := range []string{"busybox", "python1", "python2", "jre-17-1", "jre-17-2", "node-18-1", "node-18-2", "static-1", "static-2"} {
		if refs[k] == "" {
			t.Fatalf("no %s reference in %v", k, refs)
		}
	}
	digests := func(ref string) []string {
		d, err := name.NewDigest(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(d, framework.RegistryClient(t)...)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range ls {
			h, _ := l.Digest()
			out = append(out, h.String())
		}
		return out
	}
	for _, pair := range [][2]string{{"python1", "python2"}, {"jre-17-1", "jre-17-2"}, {"node-18-1", "node-18-2"}} {
		g1, g2 := digests(refs[pair[0]]), digests(refs[pair[1]])
		if len(g1) != 3 || len(g2) != 3 || g1[0] != g2[0] || g1[1] == g2[1] || g1[2] == g2[2] {
			t.Fatalf("%s and %s should share the base layer and differ in the runtime and metadata layers: %v vs %v", pair[0], pair[1], g1, g2)
		}
	}
	// The distroless runtime has no base: its packages (updated too) and its metadata.
	if s1, s2 := digests(refs["static-1"]), digests(refs["static-2"]); len(s1) != 2 || len(s2) != 2 {
		t.Fatalf("static generations: %v vs %v", s1, s2)
	}
	// Run the interpreter from generation 1's root filesystem.
	d, _ := name.NewDigest(refs["python1"], name.Insecure)
	img, err := remote.Image(d, framework.RegistryClient(t)...)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	untar := exec.Command("tar", "-x", "-C", root)
	untar.Stdin = mutate.Extract(img)
	if b, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("extract: %v %s", err, b)
	}
	run := exec.Command("chroot", "--userspec=10001:10001", root, "/usr/bin/python3", "-c",
		"import os, sys; print(sys.executable, os.getuid(), open('/etc/brewlet-runtime-release').read().strip())")
	run.Env = []string{"PATH=/usr/bin"}
	b, err := run.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "/usr/bin/python3 10001 BREWLET_RUNTIME_GENERATION=1") {
		t.Fatalf("python from the runtime image: %v: %s", err, b)
	}
}
