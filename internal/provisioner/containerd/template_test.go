package containerd

import (
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"brewlet.sh/brewlet/internal/vocab"
)

func TestTemplateFor(t *testing.T) {
	const k3s = "/var/lib/rancher/k3s/agent/etc/containerd"
	const rke2 = "/host/var/lib/rancher/rke2/agent/etc/containerd"
	for _, tc := range []struct {
		name, config string
		version      int64
		have         []string
		want         string
	}{
		{"plain containerd", "/etc/containerd/config.toml", 3, nil, ""},
		{"k3s, version 3, none yet", k3s + "/config.toml", 3, nil, k3s + "/config-v3.toml.tmpl"},
		{"k3s, version 2, none yet", k3s + "/config.toml", 2, nil, k3s + "/config.toml.tmpl"},
		{"k3s, the administrator's old template", k3s + "/config.toml", 3, []string{k3s + "/config.toml.tmpl"}, k3s + "/config.toml.tmpl"},
		{"k3s, v3 template first", k3s + "/config.toml", 3, []string{k3s + "/config.toml.tmpl", k3s + "/config-v3.toml.tmpl"}, k3s + "/config-v3.toml.tmpl"},
		{"RKE2 under a host root", rke2 + "/config.toml", 3, nil, rke2 + "/config-v3.toml.tmpl"},
		{"another file in the k3s directory", k3s + "/other.toml", 3, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exists := func(p string) bool {
				for _, h := range tc.have {
					if h == p {
						return true
					}
				}
				return false
			}
			if got := TemplateFor(tc.config, tc.version, exists); got != tc.want {
				t.Fatalf("TemplateFor = %q, want %q", got, tc.want)
			}
		})
	}
}

// The block adds the handler to any config that has the CRI tables already, without
// defining one of them again, and parses to the handler table.
func TestHandlerBlock(t *testing.T) {
	handler := map[string]any{"runtime_type": vocab.ShimRuntimeType, "pod_annotations": []string{vocab.PodAnnotationPassthrough},
		"options": map[string]any{"BinaryName": "/usr/bin/runc", "SystemdCgroup": true}}
	for _, version := range []int64{2, 3} {
		block, err := handlerBlock(version, handler)
		if err != nil {
			t.Fatal(err)
		}
		rendered := "version = " + map[int64]string{2: "2", 3: "3"}[version] + "\n[plugins]\n[plugins.'" + runtimePlugin(version) + "'.containerd.runtimes.runc]\nruntime_type = 'io.containerd.runc.v2'\n"
		var cfg map[string]any
		if err := toml.Unmarshal(withBlock([]byte(rendered), block), &cfg); err != nil {
			t.Fatalf("version %d: rendered config with the block does not parse: %v\n%s", version, err, withBlock([]byte(rendered), block))
		}
		if !handlerRegistered(cfg) {
			t.Fatalf("version %d: no handler in\n%s", version, block)
		}
		rt := runtimesOf(cfg)[0]
		opts, _ := rt[vocab.RuntimeClassName].(map[string]any)["options"].(map[string]any)
		if opts["BinaryName"] != "/usr/bin/runc" || opts["SystemdCgroup"] != true {
			t.Fatalf("version %d: options %v", version, opts)
		}
		if _, ok := rt["runc"]; !ok {
			t.Fatalf("version %d: runc lost", version)
		}
	}
}

func TestBlockEdits(t *testing.T) {
	block := []byte(blockBegin + "\n[x]\na = 1\n" + blockEnd + "\n")
	other := []byte(blockBegin + "\n[x]\na = 2\n" + blockEnd + "\n")
	for _, tc := range []struct {
		name, text string
		block      []byte
		want       string
	}{
		{"appended", "version = 3\n", block, "version = 3\n" + string(block)},
		{"appended on a line of its own", "version = 3", block, "version = 3\n" + string(block)},
		{"replaced in place", "a\n" + string(other) + "b\n", block, "a\n" + string(block) + "b\n"},
		{"taken out", "a\n" + string(block) + "b\n", nil, "a\nb\n"},
		{"nothing to take out", "a\n", nil, "a\n"},
		{"an unterminated block is not Brewlet's", "a\n" + blockBegin + "\n", block, "a\n" + blockBegin + "\n" + string(block)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(withBlock([]byte(tc.text), tc.block)); got != tc.want {
				t.Fatalf("withBlock:\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	if got := string(templateBody(nil, false, block)); !strings.HasPrefix(got, baseInclude+"\n") || !strings.HasSuffix(got, string(block)) {
		t.Fatalf("a new template: %q", got)
	}
	if got := blockOf([]byte("a\n" + string(block) + "b\n")); string(got) != string(block) {
		t.Fatalf("blockOf: %q", got)
	}
}

// The shim gets the runc handler's options but never a wrapper runtime's binary; the
// handler itself carries no options table (containerd would refuse user-namespaced
// containers on it).
func TestRuncOptionsDropAWrapperBinary(t *testing.T) {
	if _, ok := handlerTable()["options"]; ok {
		t.Fatalf("the handler carries an options table: %v", handlerTable())
	}
	for bin, want := range map[string]any{"/usr/bin/runc": "/usr/bin/runc", "/usr/local/nvidia/toolkit/nvidia-container-runtime": nil, "": ""} {
		cfg := map[string]any{"plugins": map[string]any{runtimePlugin(3): map[string]any{"containerd": map[string]any{"runtimes": map[string]any{
			"runc": map[string]any{"runtime_type": "io.containerd.runc.v2", "options": map[string]any{"BinaryName": bin, "SystemdCgroup": true}}}}}}}
		b, err := runcOptions(cfg, 3)
		if err != nil {
			t.Fatal(err)
		}
		var opts map[string]any
		if err := toml.Unmarshal(b, &opts); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		if got, ok := opts["BinaryName"]; (want == nil && ok) || (want != nil && got != want) || opts["SystemdCgroup"] != true {
			t.Errorf("runc BinaryName %q: handler options %v", bin, opts)
		}
		runc := cfg["plugins"].(map[string]any)[runtimePlugin(3)].(map[string]any)["containerd"].(map[string]any)["runtimes"].(map[string]any)["runc"].(map[string]any)
		if runc["options"].(map[string]any)["BinaryName"] != bin {
			t.Errorf("the runc handler's own options changed: %v", runc["options"])
		}
	}
}
