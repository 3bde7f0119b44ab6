package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// criRuntimePlugin is the CRI runtime plugin's table in config versions 3 and 4
// (containerd 2.x); legacyCRIPlugin is the same table in version 2 (containerd 1.x, and
// nodes upgraded to 2.x that kept their config), which containerd 2.x migrates on load.
const (
	criRuntimePlugin = "io.containerd.cri.v1.runtime"
	legacyCRIPlugin  = "io.containerd.grpc.v1.cri"
)

// Config versions Brewlet edits. A file is always written in the version of the main
// config: containerd 2.0–2.2 merge an imported file into the main config without migrating
// it, so a drop-in of another version would change how the whole config is read.
const (
	minConfigVersion = 2
	maxConfigVersion = 4
)

func runtimePlugin(version int64) string {
	if version == 2 {
		return legacyCRIPlugin
	}
	return criRuntimePlugin
}

// dropInName is the file the provisioner owns in containerd's imports directory.
const dropInName = "99-brewlet.toml"

// Handler registers the brewlet handler with a node's containerd: through a drop-in
// file where the main config imports a directory, otherwise by rewriting the main config
// with a TOML library (never by text editing). Every candidate is checked with containerd's
// own parser (`containerd config dump`), containerd is restarted only when the effective
// config changed, the handler is health-checked, and any failure rolls back.
type Handler struct {
	ConfigPath string // containerd's main config
	// Template is the file a distribution renders ConfigPath from at every start (k3s,
	// RKE2), TemplateAuto to find it with TemplateFor, "" where ConfigPath is containerd's
	// own. The handler then goes into the template (template.go), unless the config imports
	// a drop-in directory.
	Template string
	Binary   string                          // containerd, for `config dump`
	Host     HostExec                        // where Binary runs (the node's root in a pod)
	Restart  func(ctx context.Context) error // systemd in production, a hook in tests
	Health   func(ctx context.Context) error // the brewlet handler answers through CRI
	// WriteOptions stores the runc handler's options where the shim reads them
	// (hoststate.Roots.WriteHandlerOptions); nil stores nothing (the shim then runs runc
	// with its defaults).
	WriteOptions func(toml []byte) error
}

// Change reports what Ensure or Remove did.
type Change struct {
	File      string // the file written or removed
	Restarted bool
}

// Ensure registers the handler. It is idempotent: an unchanged effective config restarts
// nothing.
func (c *Handler) Ensure(ctx context.Context) (Change, error) {
	main, version, err := c.readMain()
	if err != nil {
		return Change{}, err
	}
	handler := handlerTable()
	// The options first: the shim reads them once containerd runs the handler.
	if c.WriteOptions != nil {
		opts, err := runcOptions(main, version)
		if err != nil {
			return Change{}, err
		}
		if err := c.WriteOptions(opts); err != nil {
			return Change{}, fmt.Errorf("write the brewlet handler's runc options: %w", err)
		}
	}
	if dir := importsDir(main); dir != "" {
		body, err := toml.Marshal(map[string]any{"version": version, "plugins": map[string]any{runtimePlugin(version): map[string]any{
			"containerd": map[string]any{"runtimes": map[string]any{vocab.RuntimeClassName: handler}}}}})
		if err != nil {
			return Change{}, err
		}
		return c.apply(ctx, filepath.Join(dir, dropInName), body, true)
	}
	if t := c.templateFor(version); t != "" {
		return c.ensureTemplate(ctx, t, handler, version)
	}
	runtimes, err := runtimesTable(main, version, true)
	if err != nil {
		return Change{}, err
	}
	runtimes[vocab.RuntimeClassName] = handler
	body, err := toml.Marshal(main)
	if err != nil {
		return Change{}, err
	}
	return c.apply(ctx, c.ConfigPath, body, true)
}

// Remove reverses Ensure (cleanup and uninstall).
func (c *Handler) Remove(ctx context.Context) (Change, error) {
	main, version, err := c.readMain()
	if err != nil {
		return Change{}, err
	}
	if dir := importsDir(main); dir != "" {
		return c.apply(ctx, filepath.Join(dir, dropInName), nil, false)
	}
	if t := c.templateFor(version); t != "" {
		old, err := os.ReadFile(t)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && blockOf(old) == nil) {
			return Change{}, nil
		}
		if err != nil {
			return Change{}, err
		}
		return c.applyTemplate(ctx, t, withBlock(old, nil), false)
	}
	runtimes, err := runtimesTable(main, version, false)
	if err != nil || runtimes == nil {
		return Change{}, err
	}
	if _, ok := runtimes[vocab.RuntimeClassName]; !ok {
		return Change{}, nil
	}
	delete(runtimes, vocab.RuntimeClassName)
	body, err := toml.Marshal(main)
	if err != nil {
		return Change{}, err
	}
	return c.apply(ctx, c.ConfigPath, body, false)
}

// Target is the file Ensure writes: the drop-in where the main config imports a
// directory, else the main config itself.
func (c *Handler) Target() (string, error) {
	main, version, err := c.readMain()
	if err != nil {
		return "", err
	}
	if dir := importsDir(main); dir != "" {
		return filepath.Join(dir, dropInName), nil
	}
	if t := c.templateFor(version); t != "" {
		return t, nil
	}
	return c.ConfigPath, nil
}

// Restore puts path back to body, byte for byte (existed false: removes it), with the
// same validation, restart-on-change and rollback as Ensure. Cleanup uses it to leave
// containerd's config exactly as it was before Brewlet.
func (c *Handler) Restore(ctx context.Context, path string, body []byte, existed bool) (Change, error) {
	if !existed {
		body = nil
	} else if body == nil {
		body = []byte{}
	}
	want := bytes.Contains(body, []byte(vocab.ShimRuntimeType))
	if _, version, err := c.readMain(); err == nil && path == c.templateFor(version) {
		return c.applyTemplate(ctx, path, body, want)
	}
	return c.apply(ctx, path, body, want)
}

// readMain reads containerd's main config and its version.
func (c *Handler) readMain() (map[string]any, int64, error) {
	b, err := os.ReadFile(c.ConfigPath)
	if err != nil {
		return nil, 0, err
	}
	if len(b) > maxConfigBytes {
		return nil, 0, configErr("%s is %d bytes, more than the %d Brewlet reads; nothing changed", c.ConfigPath, len(b), maxConfigBytes)
	}
	var cfg map[string]any
	if err := toml.Unmarshal(b, &cfg); err != nil {
		return nil, 0, configErr("%s is not valid TOML: %v", c.ConfigPath, err)
	}
	v, _ := cfg["version"].(int64)
	if v < minConfigVersion || v > maxConfigVersion {
		return nil, 0, configErr("%s has config version %v; Brewlet edits config versions %d to %d: run 'containerd config migrate' first, or use containerdRestart: none with the handler preinstalled (docs/install.md)",
			c.ConfigPath, cfg["version"], minConfigVersion, maxConfigVersion)
	}
	return cfg, v, nil
}

// maxConfigBytes bounds a config file and a `config dump` (tens of KB in practice).
const maxConfigBytes = 8 << 20

func configErr(format string, args ...any) error {
	return vocab.Errorf(vocab.ReasonContainerdConfigFailed, format, args...)
}

// importsDir returns the directory of a "<dir>/*.toml" import of the main config.
func importsDir(cfg map[string]any) string {
	imports, _ := cfg["imports"].([]any)
	for _, i := range imports {
		s, _ := i.(string)
		if strings.HasSuffix(s, "/*.toml") {
			return strings.TrimSuffix(s, "/*.toml")
		}
	}
	return ""
}

// runtimesTable digs out plugins.<cri runtime>.containerd.runtimes of a config of the
// given version, creating it if asked.
func runtimesTable(cfg map[string]any, version int64, create bool) (map[string]any, error) {
	cur := cfg
	for _, k := range []string{"plugins", runtimePlugin(version), "containerd", "runtimes"} {
		next, ok := cur[k]
		if !ok {
			if !create {
				return nil, nil
			}
			next = map[string]any{}
			cur[k] = next
		}
		m, ok := next.(map[string]any)
		if !ok {
			return nil, configErr("containerd config key %s is not a table", k)
		}
		cur = m
	}
	return cur, nil
}

// handlerTable is the brewlet handler: the shim's runtime type and Brewlet's pod
// annotations. It carries no options table: containerd's CRI would hand it to the shim as
// opaque TOML and then refuse user-namespaced containers on the handler (it adds their I/O
// owner only to runc options). The runc options go to the file the shim reads instead
// (runcOptions, Handler.WriteOptions).
func handlerTable() map[string]any {
	return map[string]any{
		"runtime_type":    vocab.ShimRuntimeType,
		"pod_annotations": []string{vocab.PodAnnotationPassthrough},
	}
}

// runcOptions is the runc handler's options table as TOML (binary, root, cgroup driver), so
// both handlers run alike — except a BinaryName that is not runc: a wrapper runtime there
// (one that injects hooks or devices) would run what the shim refused, and the shim refuses
// it (ContainerdConfigFailed). The shim then runs the runc on containerd's PATH.
func runcOptions(cfg map[string]any, version int64) ([]byte, error) {
	opts := map[string]any{}
	if runtimes, _ := runtimesTable(cfg, version, false); runtimes != nil {
		if runc, ok := runtimes["runc"].(map[string]any); ok {
			if o, ok := runc["options"].(map[string]any); ok {
				opts = maps.Clone(o)
				if b, _ := opts["BinaryName"].(string); b != "" && filepath.Base(b) != "runc" {
					delete(opts, "BinaryName")
				}
			}
		}
	}
	return toml.Marshal(opts)
}

// apply makes path hold body (nil removes it) so that the handler is registered or not
// (want): validate, write, restart if the effective config changed, health-check, and roll
// back on any failure.
func (c *Handler) apply(ctx context.Context, path string, body []byte, want bool) (Change, error) {
	old, err := os.ReadFile(path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Change{}, err
	}
	if (body == nil && !existed) || (existed && bytes.Equal(old, body)) {
		return Change{File: path}, nil
	}
	before, err := c.dump(ctx, c.ConfigPath)
	if err != nil {
		return Change{}, configErr("containerd rejects its current config %s, so Brewlet changes nothing: %v", c.ConfigPath, err)
	}
	restore := restorer(path, old, existed)
	if err := replaceOrRemove(path, body); err != nil {
		return Change{}, err
	}
	after, err := c.dump(ctx, c.ConfigPath)
	if err == nil {
		err = onlyHandlerChanged(before, after, want)
	}
	if err != nil {
		rerr := restore()
		return Change{}, configErr("containerd's own parser did not accept the change to %s (%v); restored it%s", path, err, suffix(rerr))
	}
	if after == before {
		return Change{File: path}, nil
	}
	return c.restartChecked(ctx, path, restore, want, nil)
}

// restartChecked restarts containerd (or the distribution that runs it) after path changed,
// then runs verify (nil: nothing) and, when the handler is wanted, the health check; any
// failure puts path back (restore) and restarts again.
func (c *Handler) restartChecked(ctx context.Context, path string, restore func() error, want bool, verify func() error) (Change, error) {
	ch := Change{File: path}
	if err := c.Restart(ctx); err != nil {
		return ch, c.rollback(ctx, restore, fmt.Errorf("restart containerd: %w", err))
	}
	ch.Restarted = true
	if verify != nil {
		if err := verify(); err != nil {
			return ch, c.rollback(ctx, restore, err)
		}
	}
	if want {
		if err := c.Health(ctx); err != nil {
			return ch, c.rollback(ctx, restore, fmt.Errorf("health check of the brewlet handler: %w", err))
		}
	}
	return ch, nil
}

// replaceOrRemove makes path hold body (nil: removes it). The file keeps the mode and
// owner it had (ReplaceFile): a config an administrator made 0600 stays 0600, before and
// after a rollback.
func replaceOrRemove(path string, body []byte) error {
	if body == nil {
		return os.Remove(path)
	}
	return hoststate.ReplaceFile(path, body, 0o644)
}

// restorer puts path back as it was (old, or absent).
func restorer(path string, old []byte, existed bool) func() error {
	if !existed {
		old = nil
	} else if old == nil {
		old = []byte{}
	}
	return func() error { return replaceOrRemove(path, old) }
}

func (c *Handler) rollback(ctx context.Context, restore func() error, cause error) error {
	rerr := restore()
	if rerr == nil {
		rerr = c.Restart(ctx)
	}
	return vocab.Wrap(vocab.ReasonContainerdConfigFailed, cause, "containerd configuration rolled back%s", suffix(rerr))
}

func suffix(err error) string {
	if err != nil {
		return fmt.Sprintf(" (and the rollback failed: %v; fix containerd by hand)", err)
	}
	return ""
}

// dump runs containerd's own config loader, which applies imports, migration and
// defaults: what the daemon would run with.
func (c *Handler) dump(ctx context.Context, config string) (string, error) {
	cmd, err := c.Host.Command(ctx, c.Binary, "--config", config, "config", "dump")
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitWriter{w: &stdout, n: maxConfigBytes + 1}, &limitWriter{w: &stderr, n: 64 << 10}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(lastLines(stderr.String(), 3)))
	}
	if stdout.Len() > maxConfigBytes {
		return "", fmt.Errorf("config dump printed more than %d bytes", maxConfigBytes)
	}
	return stdout.String(), nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
