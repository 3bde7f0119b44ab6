package artifact

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/vocab"
)

// ent describes one corpus entry for both front ends.
type ent struct {
	name   string
	typ    byte // tar type flag
	mode   int64
	link   string
	xattrs map[string]string
	devMaj int64
	socket bool // directory front end only: a unix socket
}

func dir(name string) ent  { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func file(name string) ent { return ent{name: name, typ: tar.TypeReg, mode: 0o644} }
func symlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeSymlink, mode: 0o777, link: target}
}
func hardlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeLink, mode: 0o644, link: target}
}

func tarLayer(t testing.TB, es []ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		if e.socket {
			continue
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Devmajor: e.devMaj, Format: tar.FormatPAX}
		if len(e.xattrs) > 0 {
			h.PAXRecords = map[string]string{}
			for k, v := range e.xattrs {
				h.PAXRecords[paxXattr+k] = v
			}
		}
		if e.typ == tar.TypeReg {
			h.Size = 2
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			_, _ = tw.Write([]byte("x\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// materialize writes a layer as an unpacked directory, the way containerd's overlay
// snapshotter stores it (whiteouts as 0/0 character devices, opaque as an xattr).
func materialize(t testing.TB, root string, es []ent) {
	t.Helper()
	for _, e := range es {
		p := filepath.Join(root, e.name)
		base := filepath.Base(e.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case base == opaqueMarker:
			err = unix.Setxattr(filepath.Dir(p), "trusted.overlay.opaque", []byte("y"), 0)
		case strings.HasPrefix(base, whiteoutPrefix):
			err = unix.Mknod(filepath.Join(filepath.Dir(p), strings.TrimPrefix(base, whiteoutPrefix)), unix.S_IFCHR, 0)
		case e.socket:
			var l net.Listener
			if l, err = net.Listen("unix", p); err == nil {
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				_ = l.Close()
			}
		case e.typ == tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case e.typ == tar.TypeReg:
			err = os.WriteFile(p, []byte("x\n"), 0o644)
		case e.typ == tar.TypeSymlink:
			err = os.Symlink(e.link, p)
		case e.typ == tar.TypeChar:
			err = unix.Mknod(p, unix.S_IFCHR, int(unix.Mkdev(uint32(e.devMaj), 3)))
		case e.typ == tar.TypeFifo:
			err = unix.Mkfifo(p, 0o644)
		default:
			t.Fatalf("cannot materialize %s", e.name)
		}
		if err != nil {
			t.Fatalf("materialize %s: %v", e.name, err)
		}
		marker := strings.HasPrefix(base, whiteoutPrefix)
		if !marker && (e.typ == tar.TypeReg || e.typ == tar.TypeDir) {
			mode := os.FileMode(e.mode & 0o777)
			if e.mode&0o4000 != 0 {
				mode |= os.ModeSetuid
			}
			if e.mode&0o2000 != 0 {
				mode |= os.ModeSetgid
			}
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
		}
		for k, v := range e.xattrs {
			if err := unix.Lsetxattr(p, k, []byte(v), 0); err != nil {
				t.Fatalf("setxattr %s on %s: %v", k, e.name, err)
			}
		}
	}
}

type corpusCase struct {
	name    string
	layers  [][]ent
	rule    string // "" = accepted
	path    string // entry the violation names
	tarOnly bool   // not representable as an unpacked directory
	dirOnly bool   // not representable in a tar stream
}

var corpus = []corpusCase{
	{name: "plain app", layers: [][]ent{{dir("app"), dir("app/src"), file("app/src/main.py"),
		symlink("app/current", "src"), symlink("app/abs", "/app/src/main.py")}}},
	{name: "whiteout and opaque inside app", layers: [][]ent{
		{dir("app"), dir("app/old"), file("app/old/x"), file("app/gone")},
		{dir("app"), dir("app/old"), file("app/old/.wh..wh..opq"), file("app/.wh.gone")}}},
	{name: "path outside app", layers: [][]ent{{dir("etc"), file("etc/passwd")}}, rule: RuleOutsideApp, path: "etc"},
	{name: "dotdot", layers: [][]ent{{dir("app"), file("app/../etc/passwd")}}, rule: RuleDotDot, path: "app/../etc/passwd", tarOnly: true},
	{name: "absolute path", layers: [][]ent{{file("/app/x")}}, rule: RuleAbsolute, path: "/app/x", tarOnly: true},
	{name: "absolute symlink", layers: [][]ent{{dir("app"), symlink("app/passwd", "/etc/passwd")}}, rule: RuleSymlinkEscape, path: "app/passwd"},
	{name: "relative symlink escape", layers: [][]ent{{dir("app"), symlink("app/up", "../etc")}}, rule: RuleSymlinkEscape, path: "app/up"},
	{name: "symlink chain through another layer", layers: [][]ent{
		{dir("app"), dir("app/bin"), symlink("app/python", "bin/python3")},
		{dir("app"), symlink("app/bin", "/usr/bin")}}, rule: RuleSymlinkEscape, path: "app/python"},
	{name: "hardlink escape", layers: [][]ent{{dir("app"), hardlink("app/shadow", "etc/shadow")}}, rule: RuleHardlink, path: "app/shadow", tarOnly: true},
	{name: "device", layers: [][]ent{{dir("app"), {name: "app/mem", typ: tar.TypeChar, mode: 0o644, devMaj: 1}}}, rule: RuleSpecialFile, path: "app/mem"},
	{name: "fifo", layers: [][]ent{{dir("app"), {name: "app/pipe", typ: tar.TypeFifo, mode: 0o644}}}, rule: RuleSpecialFile, path: "app/pipe"},
	{name: "socket", layers: [][]ent{{dir("app"), {name: "app/sock", socket: true}}}, rule: RuleSpecialFile, path: "app/sock", dirOnly: true},
	{name: "setuid", layers: [][]ent{{dir("app"), {name: "app/su", typ: tar.TypeReg, mode: 0o4755}}}, rule: RuleSetID, path: "app/su"},
	{name: "setgid dir", layers: [][]ent{{dir("app"), {name: "app/shared", typ: tar.TypeDir, mode: 0o2755}}}, rule: RuleSetID, path: "app/shared"},
	{name: "xattr", layers: [][]ent{{dir("app"), {name: "app/x", typ: tar.TypeReg, mode: 0o644, xattrs: map[string]string{"user.evil": "1"}}}}, rule: RuleXattr, path: "app/x"},
	{name: "file capability", layers: [][]ent{{dir("app"), {name: "app/cap", typ: tar.TypeReg, mode: 0o755, xattrs: map[string]string{"security.capability": "\x01\x00\x00\x02"}}}}, rule: RuleXattr, path: "app/cap", tarOnly: true},
	{name: "opaque marker not y", layers: [][]ent{{dir("app"), dir("app/d")}, {dir("app"), opaqueDir("app/d", "n")}}, rule: RuleXattr, path: "app/d"},
	{name: "opaque marker in the user namespace", layers: [][]ent{{dir("app"), {name: "app/d", typ: tar.TypeDir, mode: 0o755, xattrs: map[string]string{"user.overlay.opaque": "y"}}}}, rule: RuleXattr, path: "app/d"},
	{name: "overlay redirect", layers: [][]ent{{dir("app"), {name: "app/d", typ: tar.TypeDir, mode: 0o755, xattrs: map[string]string{"trusted.overlay.redirect": "/etc"}}}}, rule: RuleXattr, path: "app/d"},
	{name: "overlay metacopy", layers: [][]ent{{dir("app"), {name: "app/f", typ: tar.TypeReg, mode: 0o644, xattrs: map[string]string{"trusted.overlay.metacopy": ""}}}}, rule: RuleXattr, path: "app/f"},
	{name: "whiteout outside app", layers: [][]ent{{file(".wh.usr")}}, rule: RuleWhiteout, path: "usr"},
	{name: "opaque outside app", layers: [][]ent{{dir("etc"), file("etc/.wh..wh..opq")}}, rule: RuleWhiteout, path: "etc"},
	// Names that leave the layer or name its root once the whiteout prefix is stripped.
	{name: "whiteout of /app from below it", layers: [][]ent{{dir("app"), dir("app/x"), file("app/x/.wh...")}}, rule: RuleWhiteoutName, path: "app/x/.wh...", tarOnly: true},
	{name: "whiteout of its own directory", layers: [][]ent{{dir("app"), file("app/.wh..")}}, rule: RuleWhiteoutName, path: "app/.wh..", tarOnly: true},
	{name: "whiteout of the layer's parent", layers: [][]ent{{file(".wh...")}}, rule: RuleWhiteoutName, path: ".wh...", tarOnly: true},
	{name: "aufs metadata", layers: [][]ent{{dir("app"), file("app/.wh..wh.plnk")}}, rule: RuleWhiteoutName, path: "app/.wh..wh.plnk", tarOnly: true},
	{name: "opaque marker used as a directory", layers: [][]ent{{dir("app"), file("app/.wh..wh..opq/x")}}, rule: RuleWhiteoutParent, path: "app/.wh..wh..opq/x", tarOnly: true},
	{name: "file naming the layer root", layers: [][]ent{{file(".")}}, rule: RuleLayerRoot, path: ".", tarOnly: true},
	{name: "hardlink to the layer root", layers: [][]ent{{dir("app"), hardlink("app/l", "./")}}, rule: RuleHardlinkTarget, path: "app/l", tarOnly: true},
	{name: "hardlink through dotdot", layers: [][]ent{{dir("app"), hardlink("app/l", "app/../../etc/shadow")}}, rule: RuleHardlinkTarget, path: "app/l", tarOnly: true},
	{name: "unreadable file", layers: [][]ent{{dir("app"), {name: "app/secret", typ: tar.TypeReg, mode: 0o600}}}, rule: RuleUnreadable, path: "app/secret"},
	{name: "non-searchable directory", layers: [][]ent{{dir("app"), {name: "app/private", typ: tar.TypeDir, mode: 0o750}}}, rule: RuleNotSearchable, path: "app/private"},
}

func unbounded() *Budget { return NewBudget(context.Background(), DefaultLimits()) }

func mustValidate(t testing.TB, layers [][]Entry) []Violation {
	t.Helper()
	vs, err := Validate(unbounded(), layers)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func hasViolation(vs []Violation, rule, path string) bool {
	for _, v := range vs {
		if v.Rule == rule && v.Path == path {
			return true
		}
	}
	return false
}

func TestLayerRulesTar(t *testing.T) {
	for _, tc := range corpus {
		if tc.dirOnly {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			var readers []io.Reader
			var all [][]Entry
			var pre []Violation
			for _, l := range tc.layers {
				b := tarLayer(t, l)
				readers = append(readers, bytes.NewReader(b))
				es, vs, err := TarEntries(bytes.NewReader(b), unbounded(), "layer")
				if err != nil {
					t.Fatal(err)
				}
				all, pre = append(all, es), append(pre, vs...)
			}
			vs := append(pre, mustValidate(t, all)...)
			err := ValidateTarLayers(context.Background(), readers, nil, DefaultLimits())
			checkVerdict(t, tc, vs, err)
		})
	}
}

func TestLayerRulesDir(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must run as root: the directory front end's corpus needs devices, whiteouts and trusted.* xattrs")
		}
		t.Skip("creating devices, whiteouts and trusted.* xattrs needs root")
	}
	for _, tc := range corpus {
		if tc.tarOnly {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			var dirs []string
			for i, l := range tc.layers {
				d := filepath.Join(t.TempDir(), "layer", string(rune('0'+i)))
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				materialize(t, d, l)
				dirs = append(dirs, d)
			}
			var all [][]Entry
			for _, d := range dirs {
				es, err := DirEntries(d, unbounded(), "layer")
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, es)
			}
			checkVerdict(t, tc, mustValidate(t, all), ValidateDirLayers(context.Background(), dirs, nil, DefaultLimits()))
		})
	}
}

func checkVerdict(t *testing.T, tc corpusCase, vs []Violation, err error) {
	t.Helper()
	if tc.rule == "" {
		if err != nil {
			t.Fatalf("accepted layer refused: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("hostile layer accepted; want %q on %s", tc.rule, tc.path)
	}
	if vocab.ReasonOf(err) != vocab.ReasonLayerPathViolation {
		t.Fatalf("reason %q, want LayerPathViolation: %v", vocab.ReasonOf(err), err)
	}
	if !hasViolation(vs, tc.rule, tc.path) {
		t.Fatalf("no %q violation on %q among %+v", tc.rule, tc.path, vs)
	}
	if !strings.Contains(err.Error(), "entry ") {
		t.Fatalf("message does not name the entry: %v", err)
	}
}

func FuzzValidateTarLayer(f *testing.F) {
	for _, tc := range corpus {
		if !tc.dirOnly {
			f.Add(tarLayer(f, tc.layers[0]))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := ValidateTarLayers(context.Background(), []io.Reader{bytes.NewReader(b)}, nil, DefaultLimits())
		if err != nil {
			return
		}
		// An accepted layer holds nothing but readable, plain entries under app/.
		es, vs, rerr := TarEntries(bytes.NewReader(b), unbounded(), "layer")
		if rerr != nil || len(vs) > 0 {
			t.Fatalf("accepted a layer whose entries do not read cleanly: %v %v", rerr, vs)
		}
		for _, e := range es {
			if e.Path != "." && !UnderApp(e.Path) {
				t.Fatalf("accepted entry outside app/: %+v", e)
			}
			if e.Type == TypeDevice || e.Type == TypeFIFO || e.Mode&(os.ModeSetuid|os.ModeSetgid) != 0 || len(e.Xattrs) > 0 {
				t.Fatalf("accepted forbidden entry: %+v", e)
			}
		}
	})
}
