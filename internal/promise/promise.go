// Package promise reads what a runtime ID promises its applications from a generation's
// files, without running any of them, and says what a new generation breaks of it.
//
// A runtime ID is a compatibility promise: across digest rotations the version line, the
// numeric user and group with their accounts, the PATH and its executables, the shared
// libraries with their sonames and symbol versions, and the configured environment stay
// the same. Read writes that promise down as a Manifest (bounded: a hostile image cannot
// make it large or slow); Diff compares two, and every removal or change is breaking while
// additions are not. The same code backs `brewlet runtime diff` and the operator's refusal
// of a rotation (docs/rotation.md, "What a rotation may change").
package promise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Version of the manifest's shape; a manifest of another version is not compared.
const Version = 1

// Bounds of one read. A runtime with more is not refused for it: the manifest records
// what was cut (Truncated), and Diff says it could not compare that part.
const (
	MaxExecutables   = 4096 // per PATH entry
	MaxPathEntries   = 64
	MaxLibraries     = 4096
	MaxVersionsPerSO = 512
	MaxEnv           = 128
	MaxLineBytes     = 256     // of any string kept
	maxSmallFile     = 1 << 20 // account files, release files
)

// Manifest is what one generation promises.
type Manifest struct {
	Version int `json:"version"`
	// Lines are the ecosystems' version lines found in the files: "python" -> "3.11",
	// "java" -> "17", "node" -> "18" (or "abi 108" from libnode's soname), "os" ->
	// "debian 12".
	Lines map[string]string `json:"lines,omitempty"`
	// Account is the runtime's user and group as the account files define them.
	Account Account `json:"account"`
	// Path is each PATH entry with the executables it holds, in PATH order.
	Path []PathEntry `json:"path,omitempty"`
	// Libraries are the ELF shared objects with a soname, by soname.
	Libraries []Library `json:"libraries,omitempty"`
	// Interpreters are the program interpreters (PT_INTERP) PATH executables name.
	Interpreters []string `json:"interpreters,omitempty"`
	// Env is the configured environment but PATH.
	Env map[string]string `json:"env,omitempty"`
	// Truncated names what a bound cut short.
	Truncated []string `json:"truncated,omitempty"`
}

// Account is the numeric identity and what the account files say of it.
type Account struct {
	UID   int64  `json:"uid"`
	GID   int64  `json:"gid"`
	User  string `json:"user,omitempty"`
	Group string `json:"group,omitempty"`
	Home  string `json:"home,omitempty"`
	Shell string `json:"shell,omitempty"`
}

// PathEntry is one directory of PATH and the executables in it.
type PathEntry struct {
	Dir         string   `json:"dir"`
	Executables []string `json:"executables,omitempty"`
}

// Library is a shared object by its soname, with the symbol versions it defines.
type Library struct {
	Soname   string   `json:"soname"`
	Path     string   `json:"path"`
	Versions []string `json:"versions,omitempty"`
}

// Input is what the image's config says besides its files.
type Input struct {
	UID, GID int64
	Env      []string // KEY=VALUE
}

// Read writes down what the generation whose root is fsys promises. fsys should resolve
// symbolic links inside itself (fs.ReadLinkFS, as os.DirFS does); links are never
// followed outside it.
func Read(fsys fs.FS, in Input) (Manifest, error) {
	m := Manifest{Version: Version, Lines: map[string]string{}, Env: map[string]string{}}
	m.Account = Account{UID: in.UID, GID: in.GID}
	pathValue := ""
	for _, kv := range in.Env {
		k, v, _ := strings.Cut(kv, "=")
		if k == "PATH" {
			pathValue = v
			continue
		}
		if len(m.Env) >= MaxEnv {
			m.truncate("env")
			break
		}
		m.Env[bound(k)] = bound(v)
	}
	if err := readAccounts(fsys, &m.Account); err != nil {
		return Manifest{}, err
	}
	r := &reader{fsys: fsys, m: &m}
	if err := r.path(pathValue); err != nil {
		return Manifest{}, err
	}
	if err := r.libraries(); err != nil {
		return Manifest{}, err
	}
	readLines(fsys, &m, in.Env)
	sort.Strings(m.Interpreters)
	m.Interpreters = slices.Compact(m.Interpreters)
	return m, nil
}

func (m *Manifest) truncate(what string) {
	if !slices.Contains(m.Truncated, what) {
		m.Truncated = append(m.Truncated, what)
	}
}

// bound cuts a string kept in the manifest to MaxLineBytes.
func bound(s string) string {
	if len(s) > MaxLineBytes {
		return s[:MaxLineBytes]
	}
	return s
}

// readSmall reads a file of at most maxSmallFile bytes; a missing one is ("", nil).
func readSmall(fsys fs.FS, name string) (string, error) {
	f, err := fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSmallFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxSmallFile {
		return "", fmt.Errorf("/%s is over %d bytes", name, maxSmallFile)
	}
	return string(b), nil
}

// readAccounts fills the names, home and shell of the account's user and group.
func readAccounts(fsys fs.FS, a *Account) error {
	passwd, err := readSmall(fsys, "etc/passwd")
	if err != nil {
		return err
	}
	for _, f := range fields(passwd, 7) {
		if uid, err := strconv.ParseInt(f[2], 10, 64); err == nil && uid == a.UID {
			a.User, a.Home, a.Shell = bound(f[0]), bound(f[5]), bound(f[6])
			break
		}
	}
	group, err := readSmall(fsys, "etc/group")
	if err != nil {
		return err
	}
	for _, f := range fields(group, 4) {
		if gid, err := strconv.ParseInt(f[2], 10, 64); err == nil && gid == a.GID {
			a.Group = bound(f[0])
			break
		}
	}
	return nil
}

// fields splits colon-separated account lines with exactly n fields.
func fields(s string, n int) [][]string {
	var out [][]string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 4096), maxSmallFile)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Split(line, ":"); len(f) == n {
			out = append(out, f)
		}
	}
	return out
}

var (
	pythonDir   = regexp.MustCompile(`^python(\d+\.\d+)$`)
	javaVersion = regexp.MustCompile(`(?m)^JAVA_VERSION="?(\d+)(?:[.\d]*)"?`)
	nodeMajor   = regexp.MustCompile(`(?m)^#define NODE_MAJOR_VERSION (\d+)`)
	libnode     = regexp.MustCompile(`^libnode\.so\.(\d+)$`)
)

// readLines finds the ecosystems' version lines. What is found is what the files say; a
// runtime of another family shows as a line removed and another added.
func readLines(fsys fs.FS, m *Manifest, env []string) {
	for _, dir := range []string{"usr/lib", "usr/local/lib"} {
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			continue
		}
		var found []string
		for _, e := range entries {
			if sub := pythonDir.FindStringSubmatch(e.Name()); sub != nil {
				if _, err := fs.Stat(fsys, path.Join(dir, e.Name(), "os.py")); err == nil {
					found = append(found, sub[1])
				}
			}
		}
		if len(found) > 0 {
			sort.Strings(found)
			m.Lines["python"] = strings.Join(found, ",")
		}
	}
	var javaHomes []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "JAVA_HOME="); ok {
			javaHomes = append(javaHomes, strings.TrimPrefix(path.Clean(v), "/"))
		}
	}
	for _, root := range []string{"usr/lib/jvm", "opt/java"} {
		if entries, err := fs.ReadDir(fsys, root); err == nil {
			for _, e := range entries {
				javaHomes = append(javaHomes, path.Join(root, e.Name()))
			}
		}
	}
	for _, home := range javaHomes {
		if rel, err := readSmall(fsys, path.Join(home, "release")); err == nil {
			if sub := javaVersion.FindStringSubmatch(rel); sub != nil {
				m.Lines["java"] = sub[1]
				break
			}
		}
	}
	if h, err := readSmall(fsys, "usr/include/node/node_version.h"); err == nil {
		if sub := nodeMajor.FindStringSubmatch(h); sub != nil {
			m.Lines["node"] = sub[1]
		}
	}
	if _, ok := m.Lines["node"]; !ok {
		for _, l := range m.Libraries {
			if sub := libnode.FindStringSubmatch(l.Soname); sub != nil {
				m.Lines["node"] = "abi " + sub[1]
			}
		}
	}
	for _, name := range []string{"etc/os-release", "usr/lib/os-release"} {
		if osr, err := readSmall(fsys, name); err == nil && osr != "" {
			id, ver := osValue(osr, "ID"), osValue(osr, "VERSION_ID")
			if id != "" {
				m.Lines["os"] = bound(strings.TrimSpace(id + " " + ver))
			}
			break
		}
	}
}

func osValue(osr, key string) string {
	for _, line := range strings.Split(osr, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}
