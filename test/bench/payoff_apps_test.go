//go:build bench

package bench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"brewlet.sh/brewlet/test/framework/testimage"
)

// appFiles is application i's source tree under /app: a small socket web server (src/) and
// four pure-Python "dependencies" (lib/), about 600 KiB of generated, importable code that
// differs between applications (version v changes the application's own code only).
func appFiles(i, v int) map[string]string {
	deps := []struct {
		name string
		size int
	}{{"webkit", 220 << 10}, {"templating", 160 << 10}, {"markup", 110 << 10}, {"signing", 70 << 10}}
	files := map[string]string{}
	var imports []string
	for k, dep := range deps {
		files["lib/"+dep.name+"/__init__.py"] = pyModule(uint64(i), uint64(k), dep.size)
		imports = append(imports, dep.name)
	}
	files["src/views.py"] = pyModule(uint64(i), uint64(100+v), 40<<10)
	files["src/main.py"] = fmt.Sprintf(`import signal, socket, sys
sys.path.insert(0, "/app/lib")
import %s
import views
APP = "app%d version %d"
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(16)
print("listening", APP, flush=True)
while True:
    c, _ = s.accept()
    try:
        c.recv(4096)
        body = ("%%s %%r\n" %% (APP, views.f0(1))).encode()
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %%d\r\n\r\n" %% len(body) + body)
    finally:
        c.close()
`, strings.Join(imports, ", "), i, v)
	return files
}

// pyModule generates size bytes of deterministic, importable Python (functions and classes
// with docstrings), seeded by (app, module).
func pyModule(app, module uint64, size int) string {
	r := rand.New(rand.NewPCG(app, module))
	words := []string{"request", "response", "header", "session", "token", "render", "escape", "encode", "route", "cache", "stream", "field", "value", "context", "signal"}
	w := func() string { return words[r.IntN(len(words))] }
	var b strings.Builder
	fmt.Fprintf(&b, "\"\"\"Generated module %d of application %d.\"\"\"\n\n", module, app)
	for k := 0; b.Len() < size; k++ {
		if k%5 == 4 {
			fmt.Fprintf(&b, "class %s%d:\n    \"\"\"The %s %s of the %s.\"\"\"\n\n    def __init__(self, %s=%d):\n        self.%s = %s\n\n    def %s(self, x):\n        return [self.%s, x, %q]\n\n\n",
				strings.ToUpper(w()[:1])+w(), k, w(), w(), w(), "v", r.IntN(1000), "v", "v", w(), "v", w())
			continue
		}
		fmt.Fprintf(&b, "def f%d(x, y=%d):\n    \"\"\"Return the %s %s for a %s.\"\"\"\n    z = x * %d + y\n    if z > %d:\n        return z - %d\n    return [z, %q, %q]\n\n\n",
			k, r.IntN(1000), w(), w(), w(), r.IntN(97), r.IntN(5000), r.IntN(300), w(), w())
	}
	return b.String()
}

// appLayer is the conventional image's application layer: the same files as the artifact.
func appLayer(t *testing.T, files map[string]string) v1.Layer {
	t.Helper()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	entries := []testimage.TarEntry{{Name: "app/", Mode: 0o755, Typeflag: tar.TypeDir}}
	for _, p := range paths {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				entries = append(entries, testimage.TarEntry{Name: "app/" + d + "/", Mode: 0o755, Typeflag: tar.TypeDir})
			}
		}
		entries = append(entries, testimage.TarEntry{Name: "app/" + p, Mode: 0o644, Body: []byte(files[p])})
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	raw, err := testimage.LayerTar(entries)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression))
	if err != nil {
		t.Fatal(err)
	}
	return l
}
