package containerd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"brewlet.sh/brewlet/internal/vocab"
)

// Version is a containerd release as its binary reports it.
type Version struct {
	Major, Minor, Patch int
	Text                string // as printed, e.g. "v2.2.9"
}

func (v Version) String() string { return v.Text }

// maxVersionOutput bounds what is read of `containerd --version`: one line is expected.
const maxVersionOutput = 4096

// ParseVersion reads the output of `containerd --version`:
//
//	containerd github.com/containerd/containerd/v2 v2.2.9 <commit>
//
// Distributions print their own package versions in the third field ("1.7.24~ds1",
// "2.0.5-1"), with or without a leading v; only major.minor.patch is kept.
func ParseVersion(out []byte) (Version, error) {
	if len(out) > maxVersionOutput {
		return Version{}, fmt.Errorf("containerd --version printed %d bytes, expected one line", len(out))
	}
	line, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 3 || f[0] != "containerd" {
		return Version{}, fmt.Errorf("containerd --version printed %q, not \"containerd <module> <version> …\"", truncate(string(line), 120))
	}
	text := f[2]
	nums := strings.TrimPrefix(text, "v")
	if i := strings.IndexAny(nums, "-+~ "); i >= 0 {
		nums = nums[:i]
	}
	parts := strings.Split(nums, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("containerd reports version %q, not major.minor.patch", truncate(text, 60))
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || v > 1_000_000 || p == "" || (len(p) > 1 && p[0] == '0') {
			return Version{}, fmt.Errorf("containerd reports version %q, not major.minor.patch", truncate(text, 60))
		}
		n[i] = v
	}
	if !strings.HasPrefix(text, "v") {
		text = "v" + text
	}
	return Version{Major: n[0], Minor: n[1], Patch: n[2], Text: truncate(text, 60)}, nil
}

// Supported decides whether Brewlet can run on a containerd release. Brewlet's shim speaks
// the task API v3 (containerd's shim protocol since 2.0); containerd 1.x refuses such a
// shim at every container start ("unsupported shim version (3)"), so its nodes are refused
// before anything on them changes.
func Supported(v Version, binary string) error {
	if v.Major >= 2 {
		return nil
	}
	return vocab.Errorf(vocab.ReasonContainerdUnsupported,
		"containerd %s (%s) cannot start Brewlet's shim: the shim speaks containerd's task API v3, which containerd 2.0 introduced; "+
			"upgrade this node pool to containerd 2.0 or later, or leave it out of every NodeProfile (nothing on the node was changed)",
		v, binary)
}

// CheckVersion asks the node's containerd binary (the one that parses the config and runs
// after a restart) for its release and refuses one Brewlet cannot run on.
func (c *Handler) CheckVersion(ctx context.Context) (Version, error) {
	cmd, err := c.Host.Command(ctx, c.Binary, "--version")
	if err != nil {
		return Version{}, configErr("cannot run containerd to learn its version: %v", err)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitWriter{w: &stdout, n: maxVersionOutput + 1}, &limitWriter{w: &stderr, n: maxVersionOutput}
	if err := cmd.Run(); err != nil {
		return Version{}, configErr("%s --version: %v: %s", c.Binary, err, strings.TrimSpace(lastLines(stderr.String(), 3)))
	}
	v, err := ParseVersion(stdout.Bytes())
	if err != nil {
		return Version{}, vocab.Wrap(vocab.ReasonContainerdUnsupported, err, "%s: cannot tell which containerd this is, so Brewlet changes nothing", c.Binary)
	}
	return v, Supported(v, c.Binary)
}

// limitWriter keeps the first n bytes written and drops the rest, so a program that prints
// without end cannot fill the agent's memory.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return len(p), nil
	}
	keep := p
	if len(keep) > l.n {
		keep = keep[:l.n]
	}
	l.n -= len(keep)
	if _, err := l.w.Write(keep); err != nil {
		return 0, err
	}
	return len(p), nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
