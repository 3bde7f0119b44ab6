package cli

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"brewlet.sh/brewlet/internal/promise"
)

type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       []byte
}

func layer(t *testing.T, entries ...entry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The image's layers flattened as the node composes them (a later layer's whiteout hides
// a file), links kept as links, ELF objects with their bytes: the manifest reads the same
// promise as from an installed tree.
func TestImageFS(t *testing.T) {
	dash, err := os.ReadFile("/usr/bin/dash")
	if err != nil {
		t.Fatalf("the test reads the host's /usr/bin/dash: %v", err)
	}
	base := layer(t,
		entry{name: "usr/bin/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "usr/bin/python3.11", typ: tar.TypeReg, mode: 0o755, body: dash},
		entry{name: "usr/bin/pydoc3", typ: tar.TypeReg, mode: 0o755, body: []byte("#!/usr/bin/python3.11\n")},
		entry{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		entry{name: "etc/passwd", typ: tar.TypeReg, mode: 0o644, body: []byte("app:x:10001:10001::/home/app:/bin/sh\n")},
		entry{name: "../escape", typ: tar.TypeReg, mode: 0o755, body: []byte("x")},
	)
	upper := layer(t,
		entry{name: "usr/bin/.wh.pydoc3", typ: tar.TypeReg},
		entry{name: "usr/bin/python3", typ: tar.TypeSymlink, link: "/usr/bin/python3.11"},
	)
	img, err := mutate.AppendLayers(empty.Image, base, upper)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := imageFS(img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(fsys, "usr/bin/pydoc3"); err == nil {
		t.Error("a whiteout left the file it hides")
	}
	if target, err := fs.ReadLink(fsys, "usr/bin/python3"); err != nil || target != "/usr/bin/python3.11" {
		t.Errorf("link %q, %v", target, err)
	}
	m, err := promise.Read(fsys, promise.Input{UID: 10001, GID: 10001, Env: []string{"PATH=/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Path) != 1 || len(m.Path[0].Executables) != 2 || m.Path[0].Executables[0] != "python3" || m.Account.User != "app" {
		t.Fatalf("manifest %+v", m)
	}
	if uid, gid := numericUser("10001:10002"); uid != 10001 || gid != 10002 {
		t.Errorf("numericUser %d:%d", uid, gid)
	}
	if uid, gid := numericUser("app"); uid != 0 || gid != 0 {
		t.Errorf("a named user read as %d:%d", uid, gid)
	}
}
