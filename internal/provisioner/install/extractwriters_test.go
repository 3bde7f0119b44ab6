package install

import (
	"archive/tar"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Extraction with background writers gives the same tree as extraction strictly in order
// (or refuses too), for streams built to make entries replace, reach through and link to
// earlier ones: the same names again, files under names that were files, symlinks over
// directories with queued files, hard links, whiteouts and opaque markers. Nothing
// reaches outside the layer either way.
func TestQueuedExtractionMatchesInOrder(t *testing.T) {
	requireRoot(t)
	names := []string{"a", "b", "a/b", "a/c", "b/a", "a/b/c", "d", "d/e", "d/e/f"}
	rng := rand.New(rand.NewPCG(26, 6))
	ok := 0
	for i := range 600 {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		var desc []string
		for range 2 + rng.IntN(12) {
			n := names[rng.IntN(len(names))]
			h := tar.Header{Name: n, Mode: int64([]int{0o644, 0o600, 0o755, 0o4755}[rng.IntN(4)]), Uid: rng.IntN(3), Gid: rng.IntN(3), Format: tar.FormatPAX}
			var body []byte
			switch k := rng.IntN(10); {
			case k < 4:
				h.Typeflag = tar.TypeReg
				body = bytes.Repeat([]byte(fmt.Sprint(i, n, k)), 1+rng.IntN(3)*20000) // some above maxQueuedFile
			case k < 6:
				h.Typeflag, h.Name = tar.TypeDir, n+"/"
			case k == 6:
				h.Typeflag, h.Linkname = tar.TypeSymlink, []string{"/etc", "..", names[rng.IntN(len(names))], names[rng.IntN(len(names))], names[rng.IntN(len(names))]}[rng.IntN(5)]
			case k == 7:
				h.Typeflag, h.Linkname = tar.TypeLink, names[rng.IntN(len(names))]
			case k == 8:
				h.Typeflag, h.Name = tar.TypeReg, filepath.Join(filepath.Dir(n), ".wh."+filepath.Base(n))
			default:
				h.Typeflag, h.Name = tar.TypeReg, filepath.Join(n, ".wh..wh..opq")
			}
			h.Size = int64(len(body))
			if err := tw.WriteHeader(&h); err != nil {
				t.Fatal(err)
			}
			_, _ = tw.Write(body)
			desc = append(desc, fmt.Sprintf("%c %s %s", h.Typeflag, h.Name, h.Linkname))
		}
		_ = tw.Close()
		sandbox := t.TempDir()
		if err := os.WriteFile(filepath.Join(sandbox, "sentinel"), []byte("s"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, queued := extract(bytes.NewReader(buf.Bytes()), filepath.Join(sandbox, "layer"), -1, true)
		_, inOrder := extract(bytes.NewReader(buf.Bytes()), filepath.Join(sandbox, "in-order"), -1, false)
		if (queued == nil) != (inOrder == nil) {
			t.Fatalf("stream %d (%s): queued %v; in order %v", i, strings.Join(desc, ", "), queued, inOrder)
		}
		if queued == nil {
			if a, b := describeTree(t, filepath.Join(sandbox, "layer")), describeTree(t, filepath.Join(sandbox, "in-order")); !slices.Equal(a, b) {
				t.Fatalf("stream %d (%s): trees differ:\n%s\n---\n%s", i, strings.Join(desc, ", "), strings.Join(a, "\n"), strings.Join(b, "\n"))
			}
		}
		if queued == nil {
			ok++
		}
		_ = os.RemoveAll(filepath.Join(sandbox, "in-order"))
		sandboxUntouched(t, sandbox, "sentinel")
	}
	if ok < 150 {
		t.Errorf("only %d of 600 streams were extracted; the comparison needs more", ok)
	}
	t.Logf("%d of 600 streams extracted, the rest refused both ways", ok)
}
