package containerd

import (
	"strings"
	"testing"
)

func TestOnlyHandlerChanged(t *testing.T) {
	const base = `version = 3
imports = []
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = true
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = 'pause@sha256:1'
`
	const handler = `  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.brewlet]
    runtime_type = 'io.containerd.brewlet.v2'
`
	withHandler := strings.Replace(base, "imports = []", "imports = ['/etc/containerd/conf.d/99-brewlet.toml']", 1) + handler
	legacy := "version = 2\n[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.brewlet]\n  runtime_type = 'io.containerd.brewlet.v2'\n"
	for _, tc := range []struct {
		name          string
		before, after string
		want          bool
		err           string
	}{
		{"registered", base, withHandler, true, ""},
		{"removed", withHandler, base, false, ""},
		{"registered in a version 2 dump", "version = 2\n", legacy, true, ""},
		{"not registered", base, base, true, "brewlet handler wanted: true, found: false"},
		{"still registered", withHandler, withHandler, false, "wanted: false, found: true"},
		{"another runtime type", base, strings.Replace(withHandler, "io.containerd.brewlet.v2", "io.containerd.runc.v2", 1), true, "found: false"},
		{"runc options lost", base, strings.Replace(withHandler, "SystemdCgroup = true", "SystemdCgroup = false", 1), true,
			"plugins.io.containerd.cri.v1.runtime.containerd.runtimes.runc.options.SystemdCgroup"},
		{"sandbox image lost", base, strings.Replace(withHandler, "sandbox = 'pause@sha256:1'", "", 1), true,
			"plugins.io.containerd.cri.v1.images"},
		{"not TOML", base, "[[[", true, "not TOML"},
	} {
		err := onlyHandlerChanged(tc.before, tc.after, tc.want)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v (want %q)", tc.name, err, tc.err)
		}
	}
}
