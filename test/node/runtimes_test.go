package node

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The local runtimes are real: built from Debian packages by hack/runtimes.sh, pushed to
// a real registry; the two generations of each runtime (Debian's release version and its
// security update) share their base layer and differ in the runtime's own packages and the
// metadata layer, and the interpreter runs from the image's root filesystem. The CLI's
// runtime diff reads what each generation promises from the images themselves, and an
// installer refuses another runtime family as the next generation unless it is accepted.
// (The security update keeping the promise on a node: TestInstallGenerations.)
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

	// What each generation promises, read from the images by the CLI: a security update of
	// the same interpreter keeps the promise; another runtime family under the same ID
	// would break it, and the diff says how.
	cli := kit.BuildCLI(t)
	// The runtime's user is the RuntimeImage's spec.user; the images' configs name none.
	out, errOut, code := kit.Brewlet(t, cli, "runtime", "diff", refs["python1"], refs["python2"], "-o", "json", "--uid", "10001", "--gid", "10001")
	var diff struct {
		Old, New struct {
			Lines   map[string]string
			Account struct{ User string }
			Path    []struct{ Executables []string }
		}
		Breaking bool
	}
	if err := json.Unmarshal([]byte(out), &diff); err != nil || code != 0 || diff.Breaking {
		t.Fatalf("runtime diff python1 python2: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	if diff.Old.Lines["python"] != "3.11" || diff.New.Lines["python"] != "3.11" || diff.Old.Account.User != "app" || len(diff.Old.Path) == 0 {
		t.Fatalf("the manifests read: %+v", diff)
	}
	out, errOut, code = kit.Brewlet(t, cli, "runtime", "diff", refs["python1"], refs["node-18-1"], "--uid", "10001", "--gid", "10001")
	for _, want := range []string{"BREAKING", "line python removed", "python3 removed"} {
		if !strings.Contains(out, want) {
			t.Errorf("runtime diff python1 node-18-1 does not say %q:\n%s", want, out)
		}
	}
	if code != 1 || !strings.Contains(errOut, string(vocab.ReasonRuntimePromiseBroken)) {
		t.Fatalf("runtime diff python1 node-18-1: exit %d, %s", code, errOut)
	}

	// A node holds the same promise: the Node.js runtime as generation 2 of python-3.11 is
	// refused before current moves, unless the RuntimeImage names that digest as breaking.
	l := hoststate.Under(t.TempDir())
	in := &install.Installer{Layout: l, Trust: framework.RegistryTrust(t), Platform: kit.LinuxAMD64}
	req := func(gen int64, image string) install.Request {
		return install.Request{ID: "python-3.11", Epoch: "0b9c8d7e-6f5a-4b3c-8d2e-000000000043", Generation: gen, Image: image, UID: 10001, GID: 10001}
	}
	if _, err := in.Install(t.Context(), req(1, refs["python1"])); err != nil {
		t.Fatal(err)
	}
	_, err = in.Install(t.Context(), req(2, refs["node-18-1"]))
	if vocab.ReasonOf(err) != vocab.ReasonRuntimePromiseBroken || !strings.Contains(err.Error(), "line python removed") {
		t.Fatalf("another runtime family as generation 2: %v", err)
	}
	if cur, err := l.Current("python-3.11"); err != nil || cur.Generation != 1 {
		t.Fatalf("current %+v %v after the refusal; want generation 1", cur, err)
	}
	accepted := req(2, refs["node-18-1"])
	_, accepted.AcceptBreaking, _ = strings.Cut(refs["node-18-1"], "@")
	if _, err := in.Install(t.Context(), accepted); err != nil {
		t.Fatalf("generation 2 accepted as breaking: %v", err)
	}
	if cur, err := l.Current("python-3.11"); err != nil || cur.Generation != 2 {
		t.Fatalf("current %+v %v; want generation 2", cur, err)
	}
}
