package golden

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"

	"brewlet.sh/brewlet/internal/vocab"
)

type te struct {
	name, body, link string
	typ              byte
	mode             int64
	uid, gid         int
	xattrs           map[string]string
}

func layer(t *testing.T, es ...te) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body)), Uid: e.uid, Gid: e.gid, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		for k, v := range e.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(e.body))
	}
	_ = tw.Close()
	return &buf
}

func d(n string) te { return te{name: n, typ: tar.TypeDir} }

const (
	passwd = "root:x:0:0:root:/root:/bin/sh\napp:x:10001:10001::/home/app:/usr/sbin/nologin\n"
	group  = "root:x:0:\napp:x:10001:\n"
)

// debianish is a merged-/usr root with accounts and a PATH.
func debianish(t *testing.T, extra ...te) []io.Reader {
	base := []te{d("usr/"), d("usr/bin/"), d("usr/local/"), d("usr/local/bin/"), {name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		d("etc/"), {name: "etc/passwd", body: passwd}, {name: "etc/group", body: group}, {name: "usr/bin/python3", mode: 0o755, body: "ELF"}}
	return []io.Reader{layer(t, base...), layer(t, extra...)}
}

func TestValidate(t *testing.T) {
	user := User{UID: 10001, GID: 10001}
	goodPath := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	for _, tc := range []struct {
		name   string
		layers func(t *testing.T) []io.Reader
		env    []string
		user   User
		reason vocab.Reason // "" = valid
		want   string
	}{
		{"debian-like runtime", func(t *testing.T) []io.Reader { return debianish(t) }, goodPath, user, "", ""},
		{"distroless without PATH or accounts", func(t *testing.T) []io.Reader {
			return []io.Reader{layer(t, d("bin/"), te{name: "bin/app-server", mode: 0o755, body: "ELF"})}
		}, nil, user, "", ""},
		{"content in /app is allowed", func(t *testing.T) []io.Reader {
			return debianish(t, d("app/"), te{name: "app/README", body: "runtime docs"})
		}, goodPath, user, "", ""},
		{"relative PATH entry", func(t *testing.T) []io.Reader { return debianish(t) }, []string{"PATH=usr/bin:/bin"}, user, vocab.ReasonInvalidRuntimePath, "relative"},
		{"dot in PATH", func(t *testing.T) []io.Reader { return debianish(t) }, []string{"PATH=/usr/bin:."}, user, vocab.ReasonInvalidRuntimePath, "relative"},
		{"dotdot in PATH", func(t *testing.T) []io.Reader { return debianish(t) }, []string{"PATH=/usr/bin/../bin"}, user, vocab.ReasonInvalidRuntimePath, "'.' or '..'"},
		{"empty PATH entry", func(t *testing.T) []io.Reader { return debianish(t) }, []string{"PATH=/usr/bin::/bin"}, user, vocab.ReasonInvalidRuntimePath, "empty"},
		{"PATH into /app", func(t *testing.T) []io.Reader { return debianish(t, d("app/"), d("app/bin/")) }, []string{"PATH=/usr/bin:/app/bin"}, user, vocab.ReasonInvalidRuntimePath, "/app"},
		{"PATH via symlink into /app", func(t *testing.T) []io.Reader {
			return debianish(t, d("app/"), d("app/bin/"), te{name: "opt", typ: tar.TypeSymlink, link: "/app/bin"})
		}, []string{"PATH=/opt"}, user, vocab.ReasonInvalidRuntimePath, "resolves into /app"},
		{"PATH names a missing directory", func(t *testing.T) []io.Reader { return debianish(t) }, []string{"PATH=/usr/bin:/opt/python/bin"}, user, vocab.ReasonInvalidRuntimePath, "not a directory"},
		{"PATH names a file", func(t *testing.T) []io.Reader { return debianish(t) }, []string{"PATH=/usr/bin/python3"}, user, vocab.ReasonInvalidRuntimePath, "not a directory"},
		// PATH directories, and every directory on the way to them, only root can change.
		{"world-writable PATH directory", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "usr/local/bin/", typ: tar.TypeDir, mode: 0o777})
		}, goodPath, user, vocab.ReasonInvalidRuntimePath, "/usr/local/bin has mode 0777"},
		{"sticky world-writable PATH directory", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "tmp/", typ: tar.TypeDir, mode: 0o1777})
		}, []string{"PATH=/usr/bin:/tmp"}, user, vocab.ReasonInvalidRuntimePath, "/tmp has mode 0777"},
		{"group-writable directory on the way", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "usr/local/", typ: tar.TypeDir, mode: 0o775})
		}, goodPath, user, vocab.ReasonInvalidRuntimePath, "/usr/local has mode 0775"},
		{"PATH directory owned by the application user", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "usr/local/bin/", typ: tar.TypeDir, mode: 0o755, uid: 10001, gid: 10001})
		}, goodPath, user, vocab.ReasonInvalidRuntimePath, "/usr/local/bin is owned by uid 10001"},
		{"writable directory reached through a symlink", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "usr/bin/", typ: tar.TypeDir, mode: 0o757})
		}, []string{"PATH=/bin"}, user, vocab.ReasonInvalidRuntimePath, "/usr/bin has mode 0757"},
		{"writable symlink target's parent", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "opt/", typ: tar.TypeDir, mode: 0o777}, d("opt/py/"), d("opt/py/bin/"),
				te{name: "usr/local/py", typ: tar.TypeSymlink, link: "/opt/py/bin"})
		}, []string{"PATH=/usr/local/py"}, user, vocab.ReasonInvalidRuntimePath, "/opt has mode 0777"},
		{"root-owned PATH directory of another group", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "usr/local/bin/", typ: tar.TypeDir, mode: 0o755, gid: 10001})
		}, goodPath, user, "", ""},
		{"writable directory not on PATH", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "tmp/", typ: tar.TypeDir, mode: 0o1777}, te{name: "home/", typ: tar.TypeDir, uid: 10001})
		}, goodPath, user, "", ""},
		{"uid missing from passwd", func(t *testing.T) []io.Reader { return debianish(t) }, goodPath, User{UID: 20000, GID: 10001}, vocab.ReasonInvalidAccountFiles, "no user with uid 20000"},
		{"gid disagrees", func(t *testing.T) []io.Reader { return debianish(t) }, goodPath, User{UID: 10001, GID: 20000}, vocab.ReasonInvalidAccountFiles, "primary group"},
		{"group missing gid", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "etc/group", body: "root:x:0:\n"})
		}, goodPath, user, vocab.ReasonInvalidAccountFiles, "no group with gid"},
		{"passwd without group", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "etc/.wh.group"})
		}, goodPath, user, vocab.ReasonInvalidAccountFiles, "not both"},
		{"setuid file", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "usr/bin/su", mode: 0o4755, body: "ELF"})
		}, goodPath, user, vocab.ReasonPrivilegedRuntimeFile, "setuid"},
		{"setuid file removed by a later layer is fine", func(t *testing.T) []io.Reader {
			return []io.Reader{layer(t, d("usr/"), d("usr/bin/"), te{name: "usr/bin/su", mode: 0o4755, body: "ELF"}), layer(t, te{name: "usr/bin/.wh.su"})}
		}, nil, user, "", ""},
		{"file capability", func(t *testing.T) []io.Reader {
			return debianish(t, te{name: "usr/bin/ping", mode: 0o755, body: "ELF", xattrs: map[string]string{"security.capability": "\x01"}})
		}, goodPath, user, vocab.ReasonPrivilegedRuntimeFile, "capabilities"},
		{"setuid file behind an opaque marker that is not \"y\"", func(t *testing.T) []io.Reader {
			return []io.Reader{layer(t, d("usr/"), d("usr/bin/"), te{name: "usr/bin/su", mode: 0o4755, body: "ELF"}),
				layer(t, d("usr/"), te{name: "usr/bin/", typ: tar.TypeDir, xattrs: map[string]string{"trusted.overlay.opaque": "n"}})}
		}, nil, user, vocab.ReasonLayerPathViolation, "trusted.overlay.opaque"},
		{"setuid file behind a user.overlay opaque marker", func(t *testing.T) []io.Reader {
			return []io.Reader{layer(t, d("usr/"), d("usr/bin/"), te{name: "usr/bin/su", mode: 0o4755, body: "ELF"}),
				layer(t, d("usr/"), te{name: "usr/bin/", typ: tar.TypeDir, xattrs: map[string]string{"user.overlay.opaque": "y"}})}
		}, nil, user, vocab.ReasonLayerPathViolation, "user.overlay.opaque"},
		{"redirect attribute on a lower merged directory", func(t *testing.T) []io.Reader {
			return []io.Reader{layer(t, d("usr/"), te{name: "usr/lib/", typ: tar.TypeDir, xattrs: map[string]string{"trusted.overlay.redirect": "/usr/sbin"}}),
				layer(t, d("usr/"), d("usr/lib/"))}
		}, nil, user, vocab.ReasonLayerPathViolation, "trusted.overlay.redirect"},
		{"setuid file behind a device node the installer skips", func(t *testing.T) []io.Reader {
			return []io.Reader{layer(t, d("usr/"), d("usr/bin/"), te{name: "usr/bin/su", mode: 0o4755, body: "ELF"}),
				layer(t, d("usr/"), te{name: "usr/bin", typ: tar.TypeChar, mode: 0o644})}
		}, nil, user, vocab.ReasonPrivilegedRuntimeFile, "setuid"},
		{"setuid inode kept by a hard link after its first name is removed", func(t *testing.T) []io.Reader {
			return []io.Reader{layer(t, d("usr/"), d("usr/bin/"), te{name: "usr/bin/su", mode: 0o4755, body: "ELF"},
				te{name: "usr/bin/alias", typ: tar.TypeLink, link: "usr/bin/su", mode: 0o755}),
				layer(t, te{name: "usr/bin/.wh.su"})}
		}, nil, user, vocab.ReasonPrivilegedRuntimeFile, "usr/bin/alias"},
		{"absolute path in a runtime layer", func(t *testing.T) []io.Reader {
			return []io.Reader{layer(t, te{name: "/etc/passwd", body: passwd})}
		}, nil, user, vocab.ReasonLayerPathViolation, "must be relative"},
		{"whiteout of the layer's parent in a runtime layer", func(t *testing.T) []io.Reader {
			return []io.Reader{layer(t, d("usr/"), te{name: ".wh..."})}
		}, nil, user, vocab.ReasonLayerPathViolation, "whiteout names no entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, err := IndexTarLayers(tc.layers(t))
			var res *Result
			if err == nil {
				res, err = Validate(root, tc.env, tc.user)
			}
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("valid runtime refused: %v", err)
				}
				if len(tc.env) > 0 && res.Home != "/home/app" {
					t.Fatalf("home %q", res.Home)
				}
				return
			}
			if vocab.ReasonOf(err) != tc.reason || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want %s mentioning %q", err, tc.reason, tc.want)
			}
		})
	}
}
