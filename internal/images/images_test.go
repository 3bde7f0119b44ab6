package images

import (
	"strings"
	"testing"
)

// The operator never runs as root; the provisioner does (it changes the host). Every
// component has an entrypoint package.
func TestComponents(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Components {
		if seen[c.Name] || len(c.Packages) == 0 || !strings.HasPrefix(c.Packages[0], "./cmd/") {
			t.Errorf("component %+v", c)
		}
		seen[c.Name] = true
	}
	for _, c := range Components {
		switch c.Name {
		case "brewlet-operator":
			if c.User != NonRootUser {
				t.Errorf("operator runs as %q", c.User)
			}
		case "brewlet-provisioner":
			if c.User != "0:0" || len(c.Packages) < 2 {
				t.Errorf("provisioner %+v: needs root and the shim binary", c)
			}
		}
	}
}
