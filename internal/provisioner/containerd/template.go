package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"brewlet.sh/brewlet/internal/vocab"
)

// Template layouts: k3s and RKE2 render containerd's config.toml from a Go template
// (config-v3.toml.tmpl or config.toml.tmpl beside it) every time they start, so an edit of
// config.toml would be gone at the next restart. On such nodes Brewlet writes the handler
// into the template instead, as one block between two marker lines that the template
// passes through as text. What containerd will read after the restart is therefore the
// rendered config with that block added or taken out: Brewlet checks that prediction with
// containerd's own `config dump` before the template changes, restarts the distribution
// (which renders the template and restarts containerd), and checks the rendered result
// again, rolling back on any difference. Where the rendered config imports a directory,
// the handler goes into a drop-in there instead, like on any node (docs/install.md,
// "k3s and RKE2").

const (
	blockBegin = "# brewlet-provisioner: begin the brewlet runtime handler (removed when Brewlet leaves the node)"
	blockEnd   = "# brewlet-provisioner: end the brewlet runtime handler"
	// baseInclude renders the distribution's own config, which a template Brewlet creates
	// extends (k3s and RKE2 define "base" since their September 2023 releases).
	baseInclude = `{{ template "base" . }}`
)

// TemplateAuto as Handler.Template finds the template with TemplateFor.
const TemplateAuto = "auto"

// templateFor is the template this handler writes for a rendered config of version.
func (c *Handler) templateFor(version int64) string {
	if c.Template != TemplateAuto {
		return c.Template
	}
	return TemplateFor(c.ConfigPath, version, func(p string) bool { _, err := os.Lstat(p); return err == nil })
}

// Template file names, in the order the distributions look for them.
var templateNames = []string{"config-v3.toml.tmpl", "config.toml.tmpl"}

// distributionDirs are where k3s and RKE2 render containerd's config.
var distributionDirs = []string{"/var/lib/rancher/k3s/agent/etc/containerd", "/var/lib/rancher/rke2/agent/etc/containerd"}

// TemplateFor returns the template a distribution renders configPath from: an existing
// config-v3.toml.tmpl or config.toml.tmpl beside a k3s or RKE2 config, else the one
// matching the rendered config's version (version 3 and later: config-v3.toml.tmpl);
// "" for a config no distribution renders.
func TemplateFor(configPath string, version int64, exists func(string) bool) string {
	dir := filepath.Dir(configPath)
	ours := slices.ContainsFunc(distributionDirs, func(d string) bool { return strings.HasSuffix(dir, d) })
	if !ours || filepath.Base(configPath) != "config.toml" {
		return ""
	}
	for _, n := range templateNames {
		if exists(filepath.Join(dir, n)) {
			return filepath.Join(dir, n)
		}
	}
	if version >= 3 {
		return filepath.Join(dir, templateNames[0])
	}
	return filepath.Join(dir, templateNames[1])
}

// handlerBlock is the handler as a block of TOML text for a config of the given version:
// table headers with full paths only, so that it adds to whatever tables the rendered
// config defines without defining any of them again.
func handlerBlock(version int64, handler map[string]any) ([]byte, error) {
	body, err := toml.Marshal(handler)
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("plugins.%q.containerd.runtimes.%s", runtimePlugin(version), vocab.RuntimeClassName)
	var b strings.Builder
	b.WriteString(blockBegin + "\n[" + prefix + "]\n")
	for _, line := range strings.Split(strings.TrimRight(string(body), "\n"), "\n") {
		if strings.HasPrefix(line, "[") {
			line = "[" + prefix + "." + strings.TrimPrefix(line, "[")
		}
		b.WriteString(line + "\n")
	}
	b.WriteString(blockEnd + "\n")
	return []byte(b.String()), nil
}

// findBlock returns the start and end of Brewlet's block in text (-1 when there is none).
func findBlock(text []byte) (int, int) {
	i := bytes.Index(text, []byte(blockBegin))
	if i < 0 {
		return -1, -1
	}
	j := bytes.Index(text[i:], []byte(blockEnd))
	if j < 0 {
		return -1, -1
	}
	end := i + j + len(blockEnd)
	if end < len(text) && text[end] == '\n' {
		end++
	}
	return i, end
}

// withBlock returns text with Brewlet's block replaced by block (nil: taken out), or block
// appended on a line of its own when text has none.
func withBlock(text, block []byte) []byte {
	i, j := findBlock(text)
	if i < 0 {
		if block == nil {
			return bytes.Clone(text)
		}
		out := bytes.Clone(text)
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		return append(out, block...)
	}
	out := append(bytes.Clone(text[:i]), block...)
	return append(out, text[j:]...)
}

// blockOf returns Brewlet's block in text (a slice of it), nil when there is none.
func blockOf(text []byte) []byte {
	i, j := findBlock(text)
	if i < 0 {
		return nil
	}
	return text[i:j]
}

// templateBody is the template with the handler block for Ensure: the block replaced or
// appended, or a new template extending the distribution's base config.
func templateBody(old []byte, existed bool, block []byte) []byte {
	if !existed {
		return append([]byte(baseInclude+"\n"), block...)
	}
	return withBlock(old, block)
}

// applyTemplate makes the template hold body (nil removes it) so that the handler is
// registered or not (want) once the distribution renders it: the prediction checked with
// `config dump`, the template written, the distribution restarted, the rendered config
// checked, the health check run, and everything rolled back on any failure.
func (c *Handler) applyTemplate(ctx context.Context, path string, body []byte, want bool) (Change, error) {
	old, err := os.ReadFile(path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Change{}, err
	}
	rendered, err := os.ReadFile(c.ConfigPath)
	if err != nil {
		return Change{}, err
	}
	before, err := c.dump(ctx, c.ConfigPath)
	if err != nil {
		return Change{}, configErr("containerd rejects its current config %s, so Brewlet changes nothing: %v", c.ConfigPath, err)
	}
	unchanged := (body == nil && !existed) || (existed && body != nil && bytes.Equal(old, body))
	registered := bytesHaveHandler(before)
	if unchanged && registered == want {
		return Change{File: path}, nil
	}
	if want && registered && blockOf(old) == nil && blockOf(rendered) == nil {
		// A handler without Brewlet's block is someone else's (the administrator's
		// template): it is left alone.
		return Change{File: path}, nil
	}
	// What containerd reads once the distribution rendered body.
	after, err := c.dumpText(ctx, withBlock(rendered, blockOf(body)))
	if err == nil {
		err = onlyHandlerChanged(before, after, want)
	}
	if err != nil {
		return Change{}, configErr("containerd's own parser did not accept %s with the brewlet handler block of %s (%v); nothing changed", c.ConfigPath, path, err)
	}
	restore := restorer(path, old, existed)
	if !unchanged {
		if err := replaceOrRemove(path, body); err != nil {
			return Change{}, err
		}
	}
	if after == before {
		return Change{File: path}, nil
	}
	return c.restartChecked(ctx, path, restore, want, func() error {
		now, err := c.dump(ctx, c.ConfigPath)
		if err == nil && now != after {
			err = fmt.Errorf("the distribution rendered %s other than predicted from %s (the template may not pass Brewlet's block through); check it by hand", c.ConfigPath, path)
		}
		return err
	})
}

func bytesHaveHandler(dump string) bool {
	m, err := parseDump(dump)
	return err == nil && handlerRegistered(m)
}

// dumpText runs `config dump` on a candidate config written beside the main config (its
// relative imports and the host's view of the path stay the same), then removes it.
func (c *Handler) dumpText(ctx context.Context, text []byte) (string, error) {
	tmp := filepath.Join(filepath.Dir(c.ConfigPath), ".brewlet-candidate.toml")
	if err := os.WriteFile(tmp, text, 0o600); err != nil {
		return "", err
	}
	defer func() { _ = os.Remove(tmp) }()
	return c.dump(ctx, tmp)
}

// ensureTemplate writes the handler block into the template.
func (c *Handler) ensureTemplate(ctx context.Context, path string, handler map[string]any, version int64) (Change, error) {
	block, err := handlerBlock(version, handler)
	if err != nil {
		return Change{}, err
	}
	old, err := os.ReadFile(path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Change{}, err
	}
	return c.applyTemplate(ctx, path, templateBody(old, existed, block), true)
}
