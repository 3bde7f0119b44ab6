package containerd

import (
	"testing"

	"github.com/pelletier/go-toml/v2"
)

func TestRegistryConfigPath(t *testing.T) {
	for _, tc := range []struct {
		toml string
		want string
	}{
		{"version = 3\n[plugins.'io.containerd.cri.v1.images'.registry]\nconfig_path = '/etc/containerd/certs.d'\n", "/etc/containerd/certs.d"},
		{"version = 2\n[plugins.'io.containerd.grpc.v1.cri'.registry]\nconfig_path = '/etc/k3s/certs.d'\n", "/etc/k3s/certs.d"},
		// A version 2 key in a version 3 config is not read by containerd either.
		{"version = 3\n[plugins.'io.containerd.grpc.v1.cri'.registry]\nconfig_path = '/x'\n", ""},
		{"version = 3\n", ""},
		{"version = 3\n[plugins.'io.containerd.cri.v1.images'.registry]\nconfig_path = 7\n", ""},
	} {
		var cfg map[string]any
		if err := toml.Unmarshal([]byte(tc.toml), &cfg); err != nil {
			t.Fatal(err)
		}
		v, _ := cfg["version"].(int64)
		if got := registryConfigPath(cfg, v); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.toml, got, tc.want)
		}
	}
}
