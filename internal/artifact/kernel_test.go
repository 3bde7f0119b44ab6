package artifact

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/vocab"
)

// needRoot skips tests that create devices, trusted.* xattrs or mounts, except in CI,
// where they must run.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must run as root: overlay mounts, whiteouts and trusted.* xattrs need it")
		}
		t.Skip("needs root")
	}
}

// layerDirs materializes layers (lowest first) the way containerd's unpacker stores them.
// The base directory has a short, fixed-pattern name: overlay's mount options cannot hold
// the commas and colons a test name may carry.
func layerDirs(t *testing.T, layers [][]ent) []string {
	t.Helper()
	base, err := os.MkdirTemp("", "brewlet-ovl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	var dirs []string
	for i, l := range layers {
		d := filepath.Join(base, string(rune('a'+i)))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		materialize(t, d, l)
		dirs = append(dirs, d)
	}
	return dirs
}

// kernelView mounts the layers read-only with overlayfs, as the shim composes them, and
// returns what the kernel shows: "path type" lines, sorted.
func kernelView(t *testing.T, dirs []string) []string {
	t.Helper()
	mnt, err := os.MkdirTemp("", "brewlet-mnt-")
	if err != nil {
		t.Fatal(err)
	}
	lower := slices.Clone(dirs)
	slices.Reverse(lower) // overlay lists the top layer first
	if err := unix.Mount("overlay", mnt, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(lower, ":")); err != nil {
		_ = os.Remove(mnt)
		if os.Getenv("CI") != "" {
			t.Fatalf("overlay mount: %v", err)
		}
		t.Skipf("overlay mount: %v", err)
	}
	defer func() {
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
		_ = os.Remove(mnt)
	}()
	var out []string
	err = filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == mnt {
			return err
		}
		rel, _ := filepath.Rel(mnt, p)
		out = append(out, rel+" "+kindOf(d.Type()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeCharDevice != 0:
		return "chardev"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeType == 0:
		return "file"
	}
	return m.Type().String()
}

// viewLines is kernelView's form of a composed view.
func viewLines(layers [][]Entry) []string {
	v := NewView()
	for i, l := range layers {
		v.Apply(i, l)
	}
	var out []string
	v.Entries(func(e Entry) {
		if e.Path == "." {
			return
		}
		k := map[EntryType]string{TypeDir: "dir", TypeFile: "file", TypeSymlink: "symlink", TypeDevice: "chardev", TypeFIFO: "fifo"}[e.Type]
		out = append(out, e.Path+" "+k)
	})
	return out
}

// kernelCases are layer sets whose composition is easy to get wrong; every parent
// directory is listed so both front ends describe the same tree.
var kernelCases = []struct {
	name    string
	layers  [][]ent
	dirOnly bool // not representable in a tar stream
}{
	{name: "whiteout hides a file", layers: [][]ent{{dir("app"), file("app/a"), file("app/b")}, {dir("app"), file("app/.wh.a")}}},
	{name: "whiteout hides a tree", layers: [][]ent{
		{dir("app"), dir("app/d"), file("app/d/x"), dir("app/d/e"), file("app/d/e/y")}, {dir("app"), file("app/.wh.d")}}},
	{name: "opaque y hides lower content", layers: [][]ent{
		{dir("app"), dir("app/d"), file("app/d/x")}, {dir("app"), dir("app/d"), file("app/d/.wh..wh..opq"), file("app/d/new")}}},
	{name: "opaque n merges", layers: [][]ent{{dir("app"), dir("app/d"), file("app/d/x")}, {dir("app"), opaqueDir("app/d", "n"), file("app/d/new")}}},
	{name: "opaque yes merges", layers: [][]ent{{dir("app"), dir("app/d"), file("app/d/x")}, {dir("app"), opaqueDir("app/d", "yes")}}},
	{name: "opaque x merges", layers: [][]ent{{dir("app"), dir("app/d"), file("app/d/x")}, {dir("app"), opaqueDir("app/d", "x")}}},
	{name: "opaque empty merges", layers: [][]ent{{dir("app"), dir("app/d"), file("app/d/x")}, {dir("app"), opaqueDir("app/d", "")}}, dirOnly: true},
	{name: "user namespace opaque merges", layers: [][]ent{{dir("app"), dir("app/d"), file("app/d/x")},
		{dir("app"), {name: "app/d", typ: tar.TypeDir, mode: 0o755, xattrs: map[string]string{"user.overlay.opaque": "y"}}}}},
	{name: "opaque marker on a layer root is ignored", layers: [][]ent{{dir("app"), file("app/x")}, {file(".wh..wh..opq"), dir("app"), file("app/y")}}},
	{name: "file replaces a directory", layers: [][]ent{{dir("app"), dir("app/d"), file("app/d/x")}, {dir("app"), file("app/d")}}},
	{name: "directory over file over directory", layers: [][]ent{
		{dir("app"), dir("app/d"), file("app/d/x")}, {dir("app"), file("app/d")}, {dir("app"), dir("app/d"), file("app/d/z")}}},
	{name: "symlink replaces a directory", layers: [][]ent{{dir("app"), dir("app/d"), file("app/d/x")}, {dir("app"), symlink("app/d", "x")}}},
	{name: "opaque in the middle of three", layers: [][]ent{
		{dir("app"), dir("app/d"), file("app/d/x")}, {dir("app"), dir("app/d"), file("app/d/.wh..wh..opq"), file("app/d/y")},
		{dir("app"), dir("app/d"), file("app/d/z")}}},
	{name: "whiteout in the lowest layer", layers: [][]ent{{dir("app"), file("app/.wh.ghost"), file("app/f")}, {dir("app")}}},
	{name: "whiteout then recreated", layers: [][]ent{
		{dir("app"), file("app/a")}, {dir("app"), file("app/.wh.a")}, {dir("app"), dir("app/a"), file("app/a/n")}}},
	{name: "device that is not a whiteout", layers: [][]ent{{dir("app"), dir("app/mem"), file("app/mem/x")},
		{dir("app"), {name: "app/mem", typ: tar.TypeChar, mode: 0o644, devMaj: 1}}}},
}

func opaqueDir(name, value string) ent {
	return ent{name: name, typ: tar.TypeDir, mode: 0o755, xattrs: map[string]string{OpaqueXattr: value}}
}

// TestViewAgreesWithKernel composes each layer set with a real overlay mount and with both
// front ends, and requires the same tree: the validators judge what the kernel shows.
func TestViewAgreesWithKernel(t *testing.T) {
	needRoot(t)
	for _, tc := range kernelCases {
		t.Run(tc.name, func(t *testing.T) {
			dirs := layerDirs(t, tc.layers)
			want := kernelView(t, dirs)
			var fromDirs, fromTars [][]Entry
			for i, d := range dirs {
				es, err := DirEntries(d, unbounded(), "layer")
				if err != nil {
					t.Fatal(err)
				}
				fromDirs = append(fromDirs, es)
				tes, vs, err := TarEntries(bytes.NewReader(tarLayer(t, tc.layers[i])), unbounded(), "layer")
				if err != nil || len(vs) > 0 {
					t.Fatalf("tar: %v %v", err, vs)
				}
				fromTars = append(fromTars, tes)
			}
			if got := viewLines(fromDirs); !slices.Equal(got, want) {
				t.Errorf("directory front end composes\n%v\nthe kernel shows\n%v", got, want)
			}
			if got := viewLines(fromTars); !tc.dirOnly && !slices.Equal(got, want) {
				t.Errorf("tar front end composes\n%v\nthe kernel shows\n%v", got, want)
			}
		})
	}
}

// TestHiddenBehindNonYOpaqueRefused is issue 8's attack: a setuid file and an escaping
// symlink in a lower layer, and above them a directory whose opaque marker is not "y". The
// kernel shows both (checked on a real mount), so the validators must see, and refuse, them.
func TestHiddenBehindNonYOpaqueRefused(t *testing.T) {
	needRoot(t)
	layers := [][]ent{
		{dir("app"), dir("app/d"), {name: "app/d/su", typ: tar.TypeReg, mode: 0o4755}, symlink("app/d/link", "/etc/shadow")},
		{dir("app"), opaqueDir("app/d", "n"), file("app/d/new")},
	}
	dirs := layerDirs(t, layers)
	shown := kernelView(t, dirs)
	for _, p := range []string{"app/d/su file", "app/d/link symlink"} {
		if !slices.Contains(shown, p) {
			t.Fatalf("the kernel hides %s: %v", p, shown)
		}
	}
	check := func(t *testing.T, all [][]Entry, err error) {
		if vocab.ReasonOf(err) != vocab.ReasonLayerPathViolation {
			t.Fatalf("accepted or wrong reason: %v", err)
		}
		vs := mustValidate(t, all)
		for _, want := range []struct{ rule, path string }{
			{RuleXattr, "app/d"}, {RuleSetID, "app/d/su"}, {RuleSymlinkEscape, "app/d/link"},
		} {
			if !hasViolation(vs, want.rule, want.path) {
				t.Errorf("no %q on %s among %+v", want.rule, want.path, vs)
			}
		}
	}
	t.Run("directories", func(t *testing.T) {
		var all [][]Entry
		for _, d := range dirs {
			es, err := DirEntries(d, unbounded(), "layer")
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, es)
		}
		check(t, all, ValidateDirLayers(t.Context(), dirs, nil, DefaultLimits()))
	})
	t.Run("tar", func(t *testing.T) {
		var all [][]Entry
		var readers []io.Reader
		for _, l := range layers {
			b := tarLayer(t, l)
			es, _, err := TarEntries(bytes.NewReader(b), unbounded(), "layer")
			if err != nil {
				t.Fatal(err)
			}
			all, readers = append(all, es), append(readers, bytes.NewReader(b))
		}
		check(t, all, ValidateTarLayers(t.Context(), readers, nil, DefaultLimits()))
	})
}
