package node

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"text/template"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/containerd"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// distribution stands in for k3s or RKE2 on a harness node: at every start it renders
// containerd's config.toml from config-v3.toml.tmpl when there is one (Go text/template,
// with "base" defined as the distribution's own config), else writes its own config, then
// restarts containerd. The containerd, its config parser and CRI are real.
type distribution struct {
	n        *framework.Node
	base     []byte // what the distribution writes without a template
	tmpl     string
	restarts atomic.Int32
}

func (d *distribution) render() error {
	text, err := os.ReadFile(d.tmpl)
	if os.IsNotExist(err) {
		return os.WriteFile(d.n.ConfigPath, d.base, 0o644)
	}
	if err != nil {
		return err
	}
	t := template.New("config")
	if _, err := t.New("base").Parse(string(d.base)); err != nil {
		return err
	}
	if _, err := t.Parse(string(text)); err != nil {
		return err
	}
	var out bytes.Buffer
	if err := t.Execute(&out, nil); err != nil {
		return err
	}
	return os.WriteFile(d.n.ConfigPath, out.Bytes(), 0o644)
}

// restart is `systemctl restart k3s`: render, then restart containerd.
func (d *distribution) restart(ctx context.Context) error {
	d.restarts.Add(1)
	if err := d.render(); err != nil {
		return err
	}
	return d.n.RestartContainerd(ctx)
}

// agentKilled is how a test ends an agent in the middle of a registration, as the
// distribution's restart can (it restarts the kubelet, and with it the agent's pod): a
// panic unwinds without running a rollback, as a killed process runs none.
type agentKilled struct{}

// On k3s and RKE2 the agent writes the handler into the template the distribution renders
// containerd's config from, never into the rendered config.toml: a template of its own that
// extends the distribution's base config, or a block in the administrator's template. The
// registration survives the distribution's next restart, completes without a second restart
// when the agent is killed by the distribution's restart and comes back, and is finished
// with one when it was killed before it. Removal gives back the template byte for byte
// (none, or the administrator's) and a rendered config equal to the distribution's own.
// Where the rendered config imports a drop-in directory, the drop-in is used and the
// template left alone.
func TestContainerdDistributionTemplates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		admin   string // the administrator's template ("" none)
		imports bool
	}{
		{"k3s without a template", "", false},
		{"an administrator's template", "{{ template \"base\" . }}\n# site: nothing else changed here\n", false},
		{"a rendered config importing a drop-in directory", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) { distributionCase(t, tc.admin, tc.imports) })
	}
}

func distributionCase(t *testing.T, admin string, imports bool) {
	n := framework.StartNodeWith(t, framework.NodeOptions{WithoutBrewletHandler: true, ImportsDir: imports})
	ctx := context.Background()
	base, err := os.ReadFile(n.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	d := &distribution{n: n, base: base, tmpl: filepath.Join(filepath.Dir(n.ConfigPath), "config-v3.toml.tmpl")}
	if admin != "" {
		if err := os.WriteFile(d.tmpl, []byte(admin), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.restart(ctx); err != nil {
		t.Fatal(err)
	}
	rendered, err := os.ReadFile(n.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	survivor := startSurvivor(t, n)
	layout := hoststate.Under(n.HostPrefix)
	handler := func(restart func(context.Context) error) *containerd.HostChanges {
		cd := &containerd.Handler{ConfigPath: n.ConfigPath, Template: d.tmpl, Binary: n.ContainerdBinary(), Restart: restart, WriteOptions: layout.WriteHandlerOptions,
			Health: func(ctx context.Context) error { return kit.HandlerListed(ctx, n) }}
		return &containerd.HostChanges{Layout: layout, Containerd: cd}
	}
	prepare := func(h *containerd.HostChanges) {
		t.Helper()
		if rep := h.Prepare(ctx, vocab.ContainerdRestartValidated); !rep.ContainerdHandlerRegistered || rep.Message != "" {
			t.Fatalf("register the handler: %+v", rep)
		}
	}
	killedAt := func(restart func(context.Context) error) {
		t.Helper()
		defer func() {
			if r := recover(); r != (agentKilled{}) {
				panic(r)
			}
		}()
		handler(restart).Prepare(ctx, vocab.ContainerdRestartValidated)
		t.Fatal("the agent was not killed")
	}
	agent := handler(d.restart)
	d.restarts.Store(0)

	prepare(agent)
	if err := kit.HandlerListed(ctx, n); err != nil {
		t.Fatalf("after the distribution's restart: %v", err)
	}
	if d.restarts.Load() != 1 {
		t.Fatalf("%d restarts for one registration", d.restarts.Load())
	}
	tmpl, _ := os.ReadFile(d.tmpl)
	switch {
	case imports:
		if _, err := os.Stat(filepath.Join(n.ImportsDir, "99-brewlet.toml")); err != nil || admin != "" || tmpl != nil {
			t.Fatalf("a config importing a directory: drop-in %v, template %q", err, tmpl)
		}
	case admin == "":
		if !strings.HasPrefix(string(tmpl), "{{ template \"base\" . }}\n") || !bytes.Contains(tmpl, []byte(vocab.ShimRuntimeType)) {
			t.Fatalf("the template Brewlet made:\n%s", tmpl)
		}
	default:
		if !strings.HasPrefix(string(tmpl), admin) {
			t.Fatalf("the administrator's template was not kept as its start:\n%s", tmpl)
		}
	}
	if !imports {
		if now, _ := os.ReadFile(n.ConfigPath); !bytes.HasPrefix(now, rendered) {
			t.Fatal("the rendered config is not the distribution's own plus the handler")
		}
	}
	// The distribution restarts on its own (an upgrade, a reboot): the handler stays.
	if err := d.restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := kit.HandlerListed(ctx, n); err != nil {
		t.Fatalf("the handler did not survive the distribution's restart: %v", err)
	}
	d.restarts.Store(0)
	prepare(agent)
	if d.restarts.Load() != 0 {
		t.Fatalf("a registered node was restarted %d times", d.restarts.Load())
	}
	removeAll := func() {
		t.Helper()
		if notes, err := agent.Reverse(ctx); err != nil || notes != "" {
			t.Fatalf("reverse: %q %v", notes, err)
		}
		if err := kit.HandlerListed(ctx, n); err == nil {
			t.Fatal("handler still listed after removal")
		}
		if now, _ := os.ReadFile(d.tmpl); string(now) != admin {
			t.Fatalf("the template after removal:\n%q\nwant\n%q", now, admin)
		}
		if now, _ := os.ReadFile(n.ConfigPath); !bytes.Equal(now, rendered) {
			t.Fatalf("the rendered config after removal differs from the distribution's own:\n%s", now)
		}
	}
	removeAll()
	if imports {
		expectSurvived(t, n, survivor, "the registration and its removal")
		return
	}

	// Killed by the distribution's restart (after it rendered and restarted containerd):
	// the agent that comes back has nothing left to do.
	killedAt(func(ctx context.Context) error { _ = d.restart(ctx); panic(agentKilled{}) })
	d.restarts.Store(0)
	prepare(agent)
	if d.restarts.Load() != 0 {
		t.Fatalf("the agent back after its restart restarted the distribution %d times", d.restarts.Load())
	}
	removeAll()

	// Killed before the restart ran: the template holds the handler, the rendered config
	// does not; the agent that comes back restarts once and the registration completes.
	killedAt(func(context.Context) error { panic(agentKilled{}) })
	if err := kit.HandlerListed(ctx, n); err == nil {
		t.Fatal("the handler is listed although nothing restarted")
	}
	d.restarts.Store(0)
	prepare(agent)
	if d.restarts.Load() != 1 || kit.HandlerListed(ctx, n) != nil {
		t.Fatalf("the interrupted registration: %d restarts, handler %v", d.restarts.Load(), kit.HandlerListed(ctx, n))
	}
	removeAll()
	expectSurvived(t, n, survivor, "registrations, kills and removals")
}
