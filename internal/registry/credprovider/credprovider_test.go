package credprovider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"brewlet.sh/brewlet/internal/vocab"
)

// The kubelet's matching rules, on the examples its documentation gives and their edges.
func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		pattern, image string
		want           bool
	}{
		{"*.dkr.ecr.*.amazonaws.com", "123456789012.dkr.ecr.us-east-1.amazonaws.com/runtimes/python", true},
		{"*.dkr.ecr.*.amazonaws.com", "dkr.ecr.us-east-1.amazonaws.com/runtimes/python", false},
		{"*.azurecr.io", "corp.azurecr.io/x", true},
		{"*.azurecr.io", "a.b.azurecr.io/x", false}, // label counts differ
		{"gcr.io", "gcr.io/project/x", true},
		{"*.*.registry.io", "a.b.registry.io/x", true},
		{"registry.io:8080/path", "registry.io:8080/path/x", true},
		{"registry.io:8080/path", "registry.io:8080/other/x", false},
		{"registry.io:8080", "registry.io/x", false},
		{"registry.io", "registry.io:5000/x", false},
		{"https://registry.io", "registry.io/x", true},
		{"*-docker.pkg.dev", "europe-docker.pkg.dev/p/r/x", true},
		{"[", "x/y", false},
	} {
		if got := matches(tc.pattern, tc.image); got != tc.want {
			t.Errorf("matches(%q, %q) = %v, want %v", tc.pattern, tc.image, got, tc.want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	const good = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: ecr-credential-provider
  matchImages: ["*.dkr.ecr.*.amazonaws.com"]
  defaultCacheDuration: 12h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: [get-credentials]
  env: [{name: AWS_PROFILE, value: node}]
- name: pod-identity
  matchImages: ["*.example"]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  tokenAttributes: {serviceAccountTokenAudience: x, cacheType: Token, requireServiceAccount: true}
`
	ps, skipped, err := Parse([]byte(good))
	if err != nil || len(ps) != 1 || ps[0].Name != "ecr-credential-provider" || ps[0].DefaultCache != 12*time.Hour ||
		ps[0].Env[0] != "AWS_PROFILE=node" || len(skipped) != 1 || skipped[0] != "pod-identity" {
		t.Fatalf("Parse = %+v %v %v", ps, skipped, err)
	}
	provider := func(mut string) string {
		return "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- " + mut + "\n"
	}
	ok := "name: p\n  matchImages: [a.example]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1"
	if _, _, err := Parse([]byte(provider(ok))); err != nil {
		t.Fatalf("minimal provider: %v", err)
	}
	for _, bad := range []string{
		strings.Replace(provider(ok), "kind: CredentialProviderConfig", "kind: KubeletConfiguration", 1),
		strings.Replace(provider(ok), "kubelet.config.k8s.io/v1\n", "kubelet.config.k8s.io/v2\n", 1),
		provider(ok) + "unknown: 1\n",
		provider(strings.Replace(ok, "name: p", "name: ../p", 1)),
		provider(strings.Replace(ok, "name: p", "name: \"\"", 1)),
		provider(strings.Replace(ok, "[a.example]", "[]", 1)),
		provider(strings.Replace(ok, "[a.example]", "[\"a.[example\"]", 1)),
		provider(strings.Replace(ok, "  defaultCacheDuration: 1m\n", "", 1)),
		provider(strings.Replace(ok, "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1beta1", 1)),
		provider(ok) + "- " + ok + "\n",
	} {
		if _, _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
}

func TestParseResponse(t *testing.T) {
	const ok = `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"5m","auth":{"r.example":{"username":"u","password":"p"}}}`
	if r, err := ParseResponse([]byte(ok)); err != nil || r.Auth["r.example"].Password != "p" {
		t.Fatalf("ParseResponse = %+v %v", r, err)
	}
	for _, bad := range []string{
		"",
		"not json",
		strings.Replace(ok, `"kind":"CredentialProviderResponse"`, `"kind":"Other"`, 1),
		strings.Replace(ok, `"cacheKeyType":"Registry"`, `"cacheKeyType":"Forever"`, 1),
		strings.Replace(ok, `"5m"`, `"-5m"`, 1),
		strings.Replace(ok, `"r.example"`, `"r.[example"`, 1),
		strings.Replace(ok, `"auth"`, `"extra":1,"auth"`, 1),
		ok + `{}`,
	} {
		if _, err := ParseResponse([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzParseResponse(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{"*.r.example:5000/p":{"username":"u","password":"p"}}}`), "a.r.example:5000/p/x")
	f.Fuzz(func(t *testing.T, b []byte, image string) {
		r, err := ParseResponse(b)
		if err != nil {
			return
		}
		if c, ok := best(r.Auth, image); ok && !anyMatch(keysOf(r.Auth), image) {
			t.Fatalf("best picked %+v for %q from keys matching nothing", c, image)
		}
	})
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// plugin writes a shell plugin that answers with the password in pwFile and logs each run.
func plugin(t *testing.T, dir, registry, pwFile, logFile, cache string) {
	t.Helper()
	script := `#!/bin/sh
cat >/dev/null
echo run >> ` + logFile + `
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"` + cache + `","auth":{"` + registry + `":{"username":"u","password":"%s"}}}' "$(cat ` + pwFile + `)"
`
	if err := os.WriteFile(filepath.Join(dir, "shplugin"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func runs(t *testing.T, logFile string) int {
	b, _ := os.ReadFile(logFile)
	return strings.Count(string(b), "run")
}

// A real plugin process: asked once, its answer cached for nine tenths of its duration,
// then asked again (the new password); a repository it does not match goes to the fallback;
// a failing plugin is CredentialProviderFailed naming it.
func TestKeychainCachesAndRefreshes(t *testing.T) {
	dir := t.TempDir()
	pw, logf := filepath.Join(dir, "pw"), filepath.Join(dir, "log")
	plugin(t, dir, "r.example", pw, logf, "10s")
	if err := os.WriteFile(pw, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	k := &Keychain{BinDir: dir, Now: func() time.Time { return now }, Fallback: authn.NewMultiKeychain(),
		Providers: []Provider{{Name: "shplugin", MatchImages: []string{"r.example"}, DefaultCache: time.Minute}}}
	password := func(repo string) string {
		t.Helper()
		r, err := name.NewRepository(repo)
		if err != nil {
			t.Fatal(err)
		}
		a, err := k.ResolveContext(context.Background(), r)
		if err != nil {
			t.Fatalf("resolve %s: %v", repo, err)
		}
		cfg, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Password
	}
	if got := password("r.example/runtimes/a"); got != "one" || runs(t, logf) != 1 {
		t.Fatalf("first answer %q after %d runs", got, runs(t, logf))
	}
	_ = os.WriteFile(pw, []byte("two"), 0o600)
	now = now.Add(8 * time.Second) // within 9s of a 10s answer: cached (Registry key)
	if got := password("r.example/runtimes/b"); got != "one" || runs(t, logf) != 1 {
		t.Fatalf("cached answer %q after %d runs", got, runs(t, logf))
	}
	now = now.Add(2 * time.Second) // past nine tenths: asked again before it expires
	if got := password("r.example/runtimes/a"); got != "two" || runs(t, logf) != 2 {
		t.Fatalf("refreshed answer %q after %d runs", got, runs(t, logf))
	}
	if got := password("other.example/xy"); got != "" || runs(t, logf) != 2 {
		t.Fatalf("an unmatched registry got %q (runs %d)", got, runs(t, logf))
	}
	if k.ProviderOf("r.example/runtimes/a") != "shplugin" || k.ProviderOf("other.example/xy") != "" {
		t.Error("ProviderOf")
	}

	k.Providers[0].Name = "missing-plugin"
	r, _ := name.NewRepository("r.example/runtimes/c")
	k.cache = nil
	_, err := k.ResolveContext(context.Background(), r)
	if vocab.ReasonOf(err) != vocab.ReasonCredentialProviderFailed || !strings.Contains(err.Error(), "missing-plugin") || !strings.Contains(err.Error(), "r.example") {
		t.Fatalf("a missing plugin: %v", err)
	}
}
