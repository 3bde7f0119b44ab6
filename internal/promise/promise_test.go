package promise

import (
	"debug/elf"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// hostELF is a dynamically linked executable and the C library of the machine the tests
// run on (Debian): real objects to read, which a unit test cannot well fake.
func hostELF(t testing.TB) (exe []byte, interp string, libc []byte) {
	t.Helper()
	exe, err := os.ReadFile("/usr/bin/dash")
	if err != nil {
		t.Fatalf("the test reads the host's /usr/bin/dash (Debian package dash): %v", err)
	}
	f, err := elf.Open("/usr/bin/dash")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	libs, _ := filepath.Glob("/lib/*-linux-gnu/libc.so.6")
	if len(libs) == 0 {
		t.Fatal("the test reads the host's libc.so.6 (Debian package libc6)")
	}
	if libc, err = os.ReadFile(libs[0]); err != nil {
		t.Fatal(err)
	}
	return exe, interp, libc
}

// hostLoader is the dynamic loader the host's executables name.
func hostLoader(t testing.TB, interp string) []byte {
	t.Helper()
	b, err := os.ReadFile(interp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runtimeFS is a small runtime root: CPython 3.11's layout on a Debian 12 base, merged /usr.
func runtimeFS(t testing.TB) fstest.MapFS {
	exe, interp, libc := hostELF(t)
	link := func(target string) *fstest.MapFile {
		return &fstest.MapFile{Mode: fs.ModeSymlink | 0o777, Data: []byte(target)}
	}
	return fstest.MapFS{
		"bin":                                link("usr/bin"),
		"lib":                                link("usr/lib"),
		"lib64":                              link("usr/lib64"),
		"etc/passwd":                         {Data: []byte("root:x:0:0:root:/root:/bin/sh\napp:x:10001:10001::/home/app:/usr/sbin/nologin\n")},
		"etc/group":                          {Data: []byte("root:x:0:\napp:x:10001:\n")},
		"etc/os-release":                     {Data: []byte("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n")},
		"usr/bin/python3.11":                 {Data: exe, Mode: 0o755},
		"usr/bin/python3":                    link("python3.11"),
		"usr/bin/pydoc3":                     link("/usr/bin/../bin/python3.11"),
		"usr/bin/notes.txt":                  {Data: []byte("not executable"), Mode: 0o644},
		"usr/lib/python3.11/os.py":           {Data: []byte("# os\n")},
		"usr/lib/x86_64-linux-gnu/libc.so.6": {Data: libc, Mode: 0o755},
		"usr" + interp:                       {Data: hostLoader(t, interp), Mode: 0o755}, // /lib64 links to usr/lib64
	}
}

var pyInput = Input{UID: 10001, GID: 10001, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}}

func TestRead(t *testing.T) {
	m, err := Read(runtimeFS(t), pyInput)
	if err != nil {
		t.Fatal(err)
	}
	if m.Lines["python"] != "3.11" || m.Lines["os"] != "debian 12" {
		t.Errorf("lines %v", m.Lines)
	}
	if a := m.Account; a.User != "app" || a.Group != "app" || a.Home != "/home/app" || a.UID != 10001 {
		t.Errorf("account %+v", a)
	}
	if len(m.Path) != 3 || m.Path[0].Dir != "/usr/local/bin" || len(m.Path[0].Executables) != 0 {
		t.Fatalf("path %+v", m.Path)
	}
	for _, e := range m.Path[1:] { // /usr/bin, and /bin through its link
		if !slices.Equal(e.Executables, []string{"pydoc3", "python3", "python3.11"}) {
			t.Errorf("%s holds %v", e.Dir, e.Executables)
		}
	}
	_, interp, _ := hostELF(t)
	if !slices.Equal(m.Interpreters, []string{interp}) {
		t.Errorf("interpreters %v, want %s", m.Interpreters, interp)
	}
	var libc *Library
	for i := range m.Libraries {
		if m.Libraries[i].Soname == "libc.so.6" {
			libc = &m.Libraries[i]
		}
	}
	if libc == nil || !slices.Contains(libc.Versions, "GLIBC_2.2.5") && !slices.Contains(libc.Versions, "GLIBC_2.17") {
		t.Fatalf("libraries %+v", m.Libraries)
	}
	if m.Env["LANG"] != "C.UTF-8" || m.Env["PATH"] != "" {
		t.Errorf("env %v", m.Env)
	}
	if b, err := json.Marshal(m); err != nil || len(b) > 64<<10 {
		t.Errorf("manifest of %d bytes (%v)", len(b), err)
	}
}

// Links are resolved as inside the runtime's root: nothing outside it is named, whatever
// the link says, and a loop ends.
func TestResolveStaysInside(t *testing.T) {
	fsys := fstest.MapFS{
		"etc/passwd":  {Data: []byte("inside")},
		"up":          {Mode: fs.ModeSymlink, Data: []byte("../../../../etc/passwd")},
		"abs":         {Mode: fs.ModeSymlink, Data: []byte("/../etc/passwd")},
		"loop":        {Mode: fs.ModeSymlink, Data: []byte("loop2")},
		"loop2":       {Mode: fs.ModeSymlink, Data: []byte("loop")},
		"d/self":      {Mode: fs.ModeSymlink, Data: []byte(".")},
		"d/file":      {Data: []byte("x")},
		"dangling":    {Mode: fs.ModeSymlink, Data: []byte("/nowhere")},
		"usr/bin/sh":  {Data: []byte("sh"), Mode: 0o755},
		"bin":         {Mode: fs.ModeSymlink, Data: []byte("/usr/bin")},
		"usr/lib/lnk": {Mode: fs.ModeSymlink, Data: []byte("../../bin/sh")},
	}
	r := &reader{fsys: fsys, m: &Manifest{}}
	for _, c := range []struct{ in, want string }{
		{"up", "etc/passwd"}, {"abs", "etc/passwd"}, {"d/self/self/file", "d/file"}, {"bin/sh", "usr/bin/sh"}, {"usr/lib/lnk", "usr/bin/sh"},
	} {
		got, _, err := r.resolve(c.in)
		if err != nil || got != c.want {
			t.Errorf("resolve(%s) = %q, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"loop", "dangling"} {
		if got, _, err := r.resolve(bad); err == nil {
			t.Errorf("resolve(%s) = %q, want an error", bad, got)
		}
	}
}

func TestDiff(t *testing.T) {
	base, err := Read(runtimeFS(t), pyInput)
	if err != nil {
		t.Fatal(err)
	}
	change := func(edit func(fs fstest.MapFS, in *Input)) Manifest {
		fsys, in := runtimeFS(t), pyInput
		in.Env = slices.Clone(in.Env)
		edit(fsys, &in)
		m, err := Read(fsys, in)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, c := range []struct {
		name     string
		edit     func(fstest.MapFS, *Input)
		breaking []string // Change.String of each breaking change, in order
		added    int
	}{
		{"the same generation", func(fstest.MapFS, *Input) {}, nil, 0},
		{"another interpreter version", func(f fstest.MapFS, _ *Input) {
			delete(f, "usr/lib/python3.11/os.py")
			f["usr/lib/python3.12/os.py"] = &fstest.MapFile{Data: []byte("#")}
		}, []string{`line python changed: "3.11" -> "3.12"`}, 0},
		{"a tool dropped from PATH", func(f fstest.MapFS, _ *Input) { delete(f, "usr/bin/pydoc3") },
			[]string{"executable /usr/bin: pydoc3 removed", "executable /bin: pydoc3 removed"}, 0},
		{"the C library gone", func(f fstest.MapFS, _ *Input) { delete(f, "usr/lib/x86_64-linux-gnu/libc.so.6") },
			[]string{"library libc.so.6 removed"}, 0},
		{"another numeric user", func(_ fstest.MapFS, in *Input) { in.UID = 10002 },
			[]string{`account uid changed: "10001" -> "10002"`, "account user removed", "account home removed", "account shell removed"}, 0},
		{"an environment variable changed", func(_ fstest.MapFS, in *Input) { in.Env[1] = "LANG=C" },
			[]string{`env LANG changed: "C.UTF-8" -> "C"`}, 0},
		{"a PATH entry dropped", func(_ fstest.MapFS, in *Input) { in.Env[0] = "PATH=/usr/bin:/bin" },
			[]string{"path /usr/local/bin removed"}, 0},
		{"additions keep the promise", func(f fstest.MapFS, in *Input) {
			f["usr/bin/pip3"] = &fstest.MapFile{Data: []byte("#!/bin/sh"), Mode: 0o755}
			in.Env = append(in.Env, "PYTHONDONTWRITEBYTECODE=1")
		}, nil, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := Diff(base, change(c.edit))
			var got []string
			added := 0
			for _, x := range cs {
				if x.Breaking {
					got = append(got, x.String())
				} else if x.Kind == "added" {
					added++
				}
			}
			if !slices.Equal(got, c.breaking) || added != c.added {
				t.Fatalf("breaking %q (%d added), want %q (%d added); all: %+v", got, added, c.breaking, c.added, cs)
			}
			if s := Summary(cs, 2); (len(c.breaking) == 0) != (s == "keeps the promise") {
				t.Fatalf("summary %q", s)
			}
		})
	}
	if cs := Diff(Manifest{Version: 1}, Manifest{Version: 2}); len(cs) != 1 || !cs[0].Breaking {
		t.Fatalf("a manifest of another version compared: %+v", cs)
	}
}

// Whatever the files hold, a read ends, stays bounded and never panics: any bytes as a
// shared object, an account file, a release file, a PATH and a link target.
func FuzzRead(f *testing.F) {
	_, _, libc := hostELF(f)
	f.Add(libc[:4096], "app:x:10001:10001::/home/app:/bin/sh", "JAVA_VERSION=\"17.0.2\"", "/usr/bin:/bin", "../../x")
	f.Add([]byte("\x7fELF\x02\x01\x01"), strings.Repeat(":", 100), "", strings.Repeat("/a:", 100), "/")
	f.Fuzz(func(t *testing.T, so []byte, passwd, release, pathValue, target string) {
		fsys := fstest.MapFS{
			"usr/lib/libx.so.1":               {Data: so, Mode: 0o755},
			"usr/bin/x":                       {Data: so, Mode: 0o755},
			"usr/bin/l":                       {Mode: fs.ModeSymlink, Data: []byte(target)},
			"etc/passwd":                      {Data: []byte(passwd)},
			"usr/lib/jvm/jre/release":         {Data: []byte(release)},
			"usr/include/node/node_version.h": {Data: []byte(release)},
		}
		m, err := Read(fsys, Input{UID: 10001, GID: 10001, Env: []string{"PATH=" + pathValue}})
		if err != nil {
			return
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 4<<20 {
			t.Fatalf("manifest of %d bytes", len(b))
		}
		_ = Diff(m, m)
		if len(Breaking(Diff(m, m))) != 0 {
			t.Fatal("a manifest differs from itself")
		}
	})
}
