package kit

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/testimage"
)

// BasicAuth adds a registry's credentials to every request (the mirror's own, towards the
// origin; registries answer basic credentials on any request).
type BasicAuth struct {
	User, Password string
	RT             http.RoundTripper
}

func (b *BasicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.User, b.Password)
	return b.RT.RoundTrip(r)
}

// PushTo pushes img to a TLS registry that requires credentials and returns repo@digest.
func PushTo(t *testing.T, reg *framework.Registry, repo string, img v1.Image, user, password string) string {
	t.Helper()
	opts := []remote.Option{remote.WithTransport(reg.Transport())}
	if user != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: user, Password: password}))
	}
	ref, err := testimage.Push(img, reg.Addr+"/"+repo+":1", opts...)
	if err != nil {
		t.Fatalf("push to %s: %v", reg.Addr, err)
	}
	return ref
}

// DockerConfig writes a Docker config file with credentials per registry host and points
// DOCKER_CONFIG at it for the rest of the test.
func DockerConfig(t *testing.T, creds map[string][2]string) {
	t.Helper()
	var parts []string
	for host, c := range creds {
		parts = append(parts, fmt.Sprintf("%q:{%q:%q}", host, "auth", base64.StdEncoding.EncodeToString([]byte(c[0]+":"+c[1]))))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"auths":{`+strings.Join(parts, ",")+`}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A HOME of its own hides the machine's other credential files; the tools stay where
	// they were found.
	if os.Getenv("BREWLET_TOOLS_CACHE") == "" {
		home, _ := os.UserHomeDir()
		t.Setenv("BREWLET_TOOLS_CACHE", filepath.Join(home, ".cache", "brewlet-tools"))
	}
	t.Setenv("HOME", t.TempDir())
	t.Setenv("DOCKER_CONFIG", dir)
}
