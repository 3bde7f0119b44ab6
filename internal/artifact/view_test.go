package artifact

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"brewlet.sh/brewlet/internal/vocab"
)

// modelView is overlay composition stated the slow, obvious way (a whole-view scan per
// hidden subtree): the reference the indexed View must match.
type modelView map[string]Entry

func (m modelView) apply(entries []Entry) {
	drop := func(p string) {
		for k := range m {
			if strings.HasPrefix(k, p+"/") {
				delete(m, k)
			}
		}
	}
	for _, e := range entries {
		switch {
		case e.Path == ".":
		case e.Type == TypeWhiteout:
			delete(m, e.Path)
			drop(e.Path)
		case e.Type == TypeDir && e.Opaque:
			drop(e.Path)
		}
	}
	for _, e := range entries {
		if e.Type == TypeWhiteout || (e.Path == "." && e.Type != TypeDir) {
			continue
		}
		if e.Type != TypeDir {
			drop(e.Path)
		}
		m[e.Path] = e
	}
}

var fuzzPaths = []string{".", "a", "a/b", "a/b/c", "a/c", "b", "b/a", "a/b/d"}

// decodeLayers turns fuzz bytes into layers: the low three bits pick a path, the next
// three what to put there, and kind 7 starts a new layer.
func decodeLayers(data []byte) [][]Entry {
	layers := [][]Entry{nil}
	for _, b := range data {
		p := fuzzPaths[b&7]
		var e Entry
		switch (b >> 3) & 7 {
		case 0, 6:
			e = Entry{Path: p, Type: TypeFile, Mode: 0o644}
		case 1, 5:
			e = Entry{Path: p, Type: TypeDir, Mode: 0o755}
		case 2:
			e = Entry{Path: p, Type: TypeDir, Mode: 0o755, Opaque: true}
		case 3:
			e = Entry{Path: p, Type: TypeWhiteout}
		case 4:
			e = Entry{Path: p, Type: TypeSymlink, Linkname: "b"}
		case 7:
			layers = append(layers, nil)
			continue
		}
		layers[len(layers)-1] = append(layers[len(layers)-1], e)
	}
	return layers
}

func compareWithModel(t *testing.T, layers [][]Entry) {
	t.Helper()
	v, m := NewView(), modelView{}
	for i, l := range layers {
		v.Apply(i, l)
		m.apply(l)
	}
	var got, want []string
	v.Entries(func(e Entry) { got = append(got, fmt.Sprintf("%s %v %v", e.Path, e.Type, e.Opaque)) })
	for _, e := range m {
		want = append(want, fmt.Sprintf("%s %v %v", e.Path, e.Type, e.Opaque))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("layers %+v\nview  %v\nmodel %v", layers, got, want)
	}
}

func TestViewMatchesModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layers [][]Entry
	}{
		{"whiteout of an implicit parent", [][]Entry{
			{{Path: "a/b/c", Type: TypeFile}}, {{Path: "a", Type: TypeWhiteout}}}},
		{"file over an implicit directory", [][]Entry{
			{{Path: "a/b/c", Type: TypeFile}}, {{Path: "a/b", Type: TypeFile}}}},
		{"opaque keeps its own layer's entries", [][]Entry{
			{{Path: "a/x", Type: TypeFile}}, {{Path: "a/y", Type: TypeFile}, {Path: "a", Type: TypeDir, Opaque: true}}}},
		{"root markers hide nothing", [][]Entry{
			{{Path: "a", Type: TypeFile}}, {{Path: ".", Type: TypeDir, Opaque: true}, {Path: ".", Type: TypeWhiteout}, {Path: ".", Type: TypeFile}}}},
		{"recreated after whiteout", [][]Entry{
			{{Path: "a/b", Type: TypeFile}}, {{Path: "a", Type: TypeWhiteout}}, {{Path: "a/b/c", Type: TypeFile}}}},
	} {
		t.Run(tc.name, func(t *testing.T) { compareWithModel(t, tc.layers) })
	}
}

// FuzzViewMatchesModel checks the indexed view against the reference on arbitrary stacks.
func FuzzViewMatchesModel(f *testing.F) {
	for _, seed := range [][]byte{{0x01, 0x3a, 0x09}, {0x02, 0x38, 0x19}, {0x0b, 0x03, 0x38, 0x11, 0x38, 0x0c}, {0x10, 0x38, 0x18, 0x21}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) { compareWithModel(t, decodeLayers(data)) })
}

func tarOf(t testing.TB, n int, prefix string) []byte {
	es := []ent{dir("app")}
	for i := range n {
		es = append(es, file(fmt.Sprintf("app/%s%04d", prefix, i)))
	}
	return tarLayer(t, es)
}

func TestLimits(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		lim      Limits
		layer    []byte
		deadline bool
	}{
		{"entries", context.Background(), Limits{Entries: 10, PathBytes: 1 << 20}, tarOf(t, 10, "f"), false},
		{"path bytes", context.Background(), Limits{Entries: 100, PathBytes: 100}, tarOf(t, 20, "long-name-"), false},
		{"deadline", cancelled, DefaultLimits(), tarOf(t, 2*deadlineStride, "f"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateTarLayers(tc.ctx, []io.Reader{bytes.NewReader(tc.layer)}, []string{"app layer 1"}, tc.lim)
			if vocab.ReasonOf(err) != vocab.ReasonLimitExceeded || IsDeadline(err) != tc.deadline {
				t.Fatalf("got %v (deadline %v)", err, IsDeadline(err))
			}
			if !strings.HasPrefix(err.Error(), string(vocab.ReasonLimitExceeded)+": ") || !strings.Contains(err.Error(), "app layer 1") {
				t.Fatalf("message does not start with the reason and the layer: %v", err)
			}
		})
	}
	t.Run("within limits", func(t *testing.T) {
		if err := ValidateTarLayers(context.Background(), []io.Reader{bytes.NewReader(tarOf(t, 9, "f"))}, nil, Limits{Entries: 10, PathBytes: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("directories", func(t *testing.T) {
		d := t.TempDir()
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(d, "app", "a", "b"), 0o755); err != nil {
			t.Fatal(err)
		}
		err := ValidateDirLayers(context.Background(), []string{d}, nil, Limits{Entries: 3, PathBytes: 1 << 20})
		if vocab.ReasonOf(err) != vocab.ReasonLimitExceeded || !strings.HasPrefix(err.Error(), "LimitExceeded: ") {
			t.Fatalf("got %v", err)
		}
		if err := ValidateDirLayers(context.Background(), []string{d}, nil, Limits{Entries: 4, PathBytes: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("validation stops at the deadline", func(t *testing.T) {
		_, err := Validate(NewBudget(cancelled, DefaultLimits()), [][]Entry{{{Path: "app", Type: TypeDir, Mode: 0o755}}})
		if vocab.ReasonOf(err) != vocab.ReasonLimitExceeded || !IsDeadline(err) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestIsOpaqueMarker(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		dir, want   bool
	}{
		{OpaqueXattr, "y", true, true},
		{OpaqueXattr, "y", false, false},
		{OpaqueXattr, "n", true, false},
		{OpaqueXattr, "yes", true, false},
		{OpaqueXattr, "Y", true, false},
		{OpaqueXattr, "", true, false},
		{OpaqueXattr, "x", true, false},
		{"user.overlay.opaque", "y", true, false},
		{"trusted.overlay.redirect", "y", true, false},
	} {
		if got := isOpaqueMarker(tc.name, tc.value, tc.dir); got != tc.want {
			t.Errorf("isOpaqueMarker(%q, %q, dir=%v) = %v", tc.name, tc.value, tc.dir, got)
		}
	}
	for name, want := range map[string]bool{
		"trusted.overlay.opaque": true, "trusted.overlay.redirect": true, "trusted.overlay.metacopy": true,
		"user.overlay.origin": true, "trusted.overlayfoo": false, "security.capability": false, "user.overlay": false,
	} {
		if IsOverlayXattr(name) != want {
			t.Errorf("IsOverlayXattr(%q) != %v", name, want)
		}
	}
}

// TestTarXattrs: in a tar stream only a .wh..wh..opq marker makes a directory opaque
// (containerd drops trusted.* attributes from archives); every overlay attribute, "y"
// included, is refused by the rules.
func TestTarXattrs(t *testing.T) {
	for _, tc := range []struct {
		e      ent
		opaque bool
		xattrs []string
	}{
		{opaqueDir("app/d", "y"), false, []string{OpaqueXattr}},
		{file("app/d/.wh..wh..opq"), true, nil},
		{opaqueDir("app/d", "n"), false, []string{OpaqueXattr}},
		{ent{name: "app/f", typ: tar.TypeReg, mode: 0o644, xattrs: map[string]string{OpaqueXattr: "y"}}, false, []string{OpaqueXattr}},
		{ent{name: "app/d", typ: tar.TypeDir, mode: 0o755, xattrs: map[string]string{"trusted.overlay.redirect": "/x", "user.overlay.opaque": "y"}}, false,
			[]string{"trusted.overlay.redirect", "user.overlay.opaque"}},
	} {
		es, _, err := TarEntries(bytes.NewReader(tarLayer(t, []ent{tc.e})), unbounded(), "layer")
		if err != nil || len(es) != 1 {
			t.Fatal(err, es)
		}
		if es[0].Opaque != tc.opaque || !slices.Equal(es[0].Xattrs, tc.xattrs) {
			t.Errorf("%s %v: opaque %v xattrs %v", tc.e.name, tc.e.xattrs, es[0].Opaque, es[0].Xattrs)
		}
		if rule, _ := checkEntry(es[0]); (rule == RuleXattr) != (len(tc.xattrs) > 0) {
			t.Errorf("%s %v: rule %q", tc.e.name, tc.e.xattrs, rule)
		}
	}
}

// TestDirEntriesBatches reads a directory larger than one batch completely, sorted.
func TestDirEntriesBatches(t *testing.T) {
	d := t.TempDir()
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(d, "app")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	n := dirBatch + 5
	for i := range n {
		if err := os.WriteFile(filepath.Join(app, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	es, err := DirEntries(d, unbounded(), "layer")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != n+2 || es[0].Path != "." || es[1].Path != "app" || es[len(es)-1].Path != fmt.Sprintf("app/f%05d", n-1) {
		t.Fatalf("%d entries, first %v, last %v", len(es), es[0], es[len(es)-1])
	}
	if !slices.IsSortedFunc(es, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) }) {
		t.Fatal("entries are not sorted")
	}
}
