package artifact

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
)

// Every way an archive name can leave its layer, name its root or misuse a whiteout
// prefix, and the names that must keep working.
func TestJudgeName(t *testing.T) {
	for _, tc := range []struct {
		name     string
		path     string // "" when refused
		whiteout bool
		opaque   bool
		rule     string
	}{
		{name: "usr/bin/python3", path: "usr/bin/python3"},
		{name: "./usr/bin/", path: "usr/bin"},
		{name: "./", path: "."},
		{name: "", path: "."},
		{name: "a//b/./c", path: "a/b/c"},
		{name: "etc/.wh.motd", path: "etc/motd", whiteout: true},
		{name: ".wh.usr", path: "usr", whiteout: true},
		{name: "etc/.wh..hidden", path: "etc/.hidden", whiteout: true},
		{name: "var/cache/.wh..wh..opq", path: "var/cache", opaque: true},
		{name: ".wh..wh..opq", path: ".", opaque: true}, // the kernel ignores it on a root
		{name: "/etc/passwd", rule: RuleAbsolute},
		{name: "../etc/passwd", rule: RuleDotDot},
		{name: "a/../../b", rule: RuleDotDot},
		{name: "a/../b", rule: RuleDotDot},
		// The finding: a whiteout whose name strips to ".." deletes the layer's parent.
		{name: ".wh...", rule: RuleWhiteoutName},
		{name: "./.wh...", rule: RuleWhiteoutName},
		{name: "a/b/.wh...", rule: RuleWhiteoutName},
		{name: ".wh..", rule: RuleWhiteoutName},
		{name: "a/.wh..", rule: RuleWhiteoutName},
		{name: ".wh.", rule: RuleWhiteoutName},
		{name: "a/.wh./", rule: RuleWhiteoutName},
		{name: ".wh..wh.plnk", rule: RuleWhiteoutName},
		{name: "a/.wh..wh.aufs", rule: RuleWhiteoutName},
		{name: ".wh..wh..opq/x", rule: RuleWhiteoutParent},
		{name: "a/.wh..wh..opq/.wh..wh..opq", rule: RuleWhiteoutParent},
		{name: ".wh.etc/passwd", rule: RuleWhiteoutParent},
		{name: "a/.wh.b/.wh.c", rule: RuleWhiteoutParent},
		{name: ".wh..../x", rule: RuleWhiteoutParent},
	} {
		n, rule, _ := judgeName(tc.name)
		if rule != tc.rule || (rule == "" && (n.path != tc.path || n.whiteout != tc.whiteout || n.opaque != tc.opaque)) {
			t.Errorf("judgeName(%q) = %+v %q; want path %q whiteout %v opaque %v rule %q", tc.name, n, rule, tc.path, tc.whiteout, tc.opaque, tc.rule)
		}
		if rule == "" && n.path != "." && !InLayer(n.path) {
			t.Errorf("judgeName(%q) accepted %q, which InLayer refuses", tc.name, n.path)
		}
	}
}

func TestJudgeHardlinkTarget(t *testing.T) {
	for _, tc := range []struct{ link, want string }{
		{"usr/bin/python3", "usr/bin/python3"},
		{"./usr/bin/python3", "usr/bin/python3"},
		{"", ""},
		{".", ""},
		{"./", ""},
		{"..", ""},
		{"../x", ""},
		{"a/../../x", ""},
		{"/etc/shadow", ""},
		{"etc/.wh.shadow", ""},
		{".wh..wh..opq", ""},
	} {
		got, rule := judgeHardlinkTarget(tc.link)
		if got != tc.want || (tc.want == "") != (rule == RuleHardlinkTarget) {
			t.Errorf("judgeHardlinkTarget(%q) = %q %q; want %q", tc.link, got, rule, tc.want)
		}
	}
}

func TestInLayer(t *testing.T) {
	for _, tc := range []struct {
		p  string
		ok bool
	}{
		{"a", true}, {"a/b", true}, {".a", true}, {"..a", true}, {"a/..b", true},
		{"", false}, {".", false}, {"..", false}, {"/a", false}, {"a/..", false},
		{"a/../b", false}, {"./a", false}, {"a/", false}, {"a//b", false}, {"../a", false},
	} {
		if got := InLayer(tc.p); got != tc.ok {
			t.Errorf("InLayer(%q) = %v, want %v", tc.p, got, tc.ok)
		}
	}
}

// FuzzTarNames: whatever the stream, every entry the tar reader hands on names a path
// strictly inside the layer (or is a directory entry for its root), and every hard link
// target does too. Both the node's extractor and the build-time validator read through it.
func FuzzTarNames(f *testing.F) {
	for _, names := range [][]string{
		{".wh...", "a/.wh..", ".wh..wh..opq", "a/b"},
		{".wh..wh..opq/x", "./", "a/.wh.b/c"},
		{"../x", "/x", "a/../../b"},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, n := range names {
			_ = tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX})
		}
		_ = tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "..", Format: tar.FormatPAX})
		_ = tw.WriteHeader(&tar.Header{Name: "m", Typeflag: tar.TypeLink, Linkname: "./", Format: tar.FormatPAX})
		_ = tw.Close()
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ReadTarHeaders(bytes.NewReader(b), func(e Entry, h *tar.Header, _ io.Reader) error {
			if e.Path == "." {
				if e.Type != TypeDir {
					t.Fatalf("%q became a %s naming the layer root", h.Name, e.Type)
				}
			} else if !InLayer(e.Path) {
				t.Fatalf("%q became %q, outside the layer", h.Name, e.Path)
			}
			if e.Type == TypeHardlink && !InLayer(e.Linkname) {
				t.Fatalf("hard link %q to %q became target %q", h.Name, h.Linkname, e.Linkname)
			}
			return nil
		})
	})
}
