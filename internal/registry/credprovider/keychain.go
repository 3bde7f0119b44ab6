package credprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/sync/singleflight"
	credv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// maxResponseBytes bounds what a plugin may print (a response is a few KB).
const maxResponseBytes = 1 << 20

// DefaultTimeout bounds one plugin run.
const DefaultTimeout = 30 * time.Second

// Keychain answers credentials for an image from the node's plugins, then from Fallback (the
// Docker config of the agent, a mounted pull Secret). It is a go-containerregistry keychain.
type Keychain struct {
	Providers []Provider
	BinDir    string // the plugins' directory, as Command sees it
	// Command makes the process for a plugin (nil: exec.CommandContext in the agent's own
	// filesystem). The agent runs plugins chrooted into the node's root, as the kubelet does.
	Command  func(ctx context.Context, name string, args ...string) (*exec.Cmd, error)
	Fallback authn.Keychain
	Timeout  time.Duration // per run (0: DefaultTimeout)
	Now      func() time.Time

	mu     sync.Mutex
	cache  map[string]cached // provider + cache key
	flight singleflight.Group
}

type cached struct {
	auth    map[string]credv1.AuthConfig
	refresh time.Time // ask again from here on
}

// ProviderError is a plugin that could not give an answer.
type ProviderError struct {
	Provider, Image string
	Err             error
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("credential provider %s for %s: %v", e.Provider, e.Image, e.Err)
}

func (e *ProviderError) Unwrap() error { return e.Err }

// Resolve implements authn.Keychain.
func (k *Keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	return k.ResolveContext(context.Background(), r)
}

// ResolveContext implements authn.ContextKeychain: the first provider whose matchImages
// covers the repository and whose answer holds credentials for it wins; otherwise Fallback.
// (The kubelet tries the credentials of every matching provider in turn; a registry client
// takes one.)
func (k *Keychain) ResolveContext(ctx context.Context, r authn.Resource) (authn.Authenticator, error) {
	image := r.String()
	for _, p := range k.Providers {
		if !anyMatch(p.MatchImages, image) {
			continue
		}
		auth, err := k.ask(ctx, p, image)
		if err != nil {
			return nil, vocab.Wrap(vocab.ReasonCredentialProviderFailed, &ProviderError{Provider: p.Name, Image: image, Err: err},
				"the node's credential provider %s gave no credentials for %s; check the plugin's configuration and its access (it runs as the kubelet runs it)", p.Name, r.RegistryStr())
		}
		if c, ok := best(auth, image); ok {
			return authn.FromConfig(authn.AuthConfig{Username: c.Username, Password: c.Password}), nil
		}
	}
	if k.Fallback == nil {
		return authn.Anonymous, nil
	}
	return authn.Resolve(ctx, k.Fallback, r)
}

// ProviderOf names the provider that would answer for image ("" when none matches).
func (k *Keychain) ProviderOf(image string) string {
	for _, p := range k.Providers {
		if anyMatch(p.MatchImages, image) {
			return p.Name
		}
	}
	return ""
}

func anyMatch(patterns []string, image string) bool {
	for _, m := range patterns {
		if matches(m, image) {
			return true
		}
	}
	return false
}

// best is the answer's entry for image with the longest matching key, as the kubelet picks
// the most specific one first.
func best(auth map[string]credv1.AuthConfig, image string) (credv1.AuthConfig, bool) {
	var out credv1.AuthConfig
	longest := -1
	for key, c := range auth {
		if matches(key, image) && len(key) > longest {
			out, longest = c, len(key)
		}
	}
	return out, longest >= 0
}

func (k *Keychain) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// ask returns the provider's answer for image, from the cache while it is fresh.
func (k *Keychain) ask(ctx context.Context, p Provider, image string) (map[string]credv1.AuthConfig, error) {
	for _, key := range cacheKeys(p.Name, image) {
		k.mu.Lock()
		c, ok := k.cache[key]
		k.mu.Unlock()
		if ok && k.now().Before(c.refresh) {
			return c.auth, nil
		}
	}
	v, err, _ := k.flight.Do(p.Name+"\x00"+image, func() (any, error) {
		resp, err := k.run(ctx, p, image)
		if err != nil {
			return nil, err
		}
		k.store(p, image, resp)
		return resp.Auth, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(map[string]credv1.AuthConfig), nil
}

// cacheKeys are the keys an answer for image may be stored under, most specific first.
func cacheKeys(provider, image string) []string {
	registry, _, _ := strings.Cut(image, "/")
	return []string{provider + "|Image|" + image, provider + "|Registry|" + registry, provider + "|Global|"}
}

// store caches an answer for its duration (the response's, else the provider's default)
// and asks again once nine tenths of it have passed, so a token is replaced before it
// expires. A zero duration is not cached.
func (k *Keychain) store(p Provider, image string, resp *credv1.CredentialProviderResponse) {
	d := p.DefaultCache
	if resp.CacheDuration != nil {
		d = resp.CacheDuration.Duration
	}
	if d <= 0 {
		return
	}
	keys := cacheKeys(p.Name, image)
	key := keys[0]
	switch resp.CacheKeyType {
	case credv1.RegistryPluginCacheKeyType:
		key = keys[1]
	case credv1.GlobalPluginCacheKeyType:
		key = keys[2]
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cache == nil {
		k.cache = map[string]cached{}
	}
	k.cache[key] = cached{auth: resp.Auth, refresh: k.now().Add(d - d/10)}
}

// run executes the plugin once: the request on stdin, the response on stdout, bounded in
// time and size.
func (k *Keychain) run(ctx context.Context, p Provider, image string) (*credv1.CredentialProviderResponse, error) {
	timeout := k.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := json.Marshal(map[string]string{"apiVersion": pluginAPIVersion, "kind": "CredentialProviderRequest", "image": image})
	if err != nil {
		return nil, err
	}
	command := k.Command
	if command == nil {
		command = func(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
			return exec.CommandContext(ctx, name, args...), nil
		}
	}
	cmd, err := command(ctx, filepath.Join(k.BinDir, p.Name), p.Args...)
	if err != nil {
		return nil, err
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, p.Env...)
	cmd.Stdin = bytes.NewReader(req)
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = maxResponseBytes, 4<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no answer within %s", timeout)
		}
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if stdout.over {
		return nil, fmt.Errorf("printed more than %d bytes", maxResponseBytes)
	}
	return ParseResponse(stdout.Bytes())
}

// ParseResponse checks a plugin's answer: the v1 response, strictly decoded, a known cache
// key type, a non-negative duration and auth keys that are image patterns.
func ParseResponse(b []byte) (*credv1.CredentialProviderResponse, error) {
	var resp credv1.CredentialProviderResponse
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		return nil, fmt.Errorf("the answer is not a CredentialProviderResponse: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("the answer has data after the response")
	}
	if resp.APIVersion != pluginAPIVersion || resp.Kind != "CredentialProviderResponse" {
		return nil, fmt.Errorf("the answer is apiVersion %q kind %q; want %s CredentialProviderResponse", resp.APIVersion, resp.Kind, pluginAPIVersion)
	}
	switch resp.CacheKeyType {
	case credv1.ImagePluginCacheKeyType, credv1.RegistryPluginCacheKeyType, credv1.GlobalPluginCacheKeyType:
	default:
		return nil, fmt.Errorf("the answer's cacheKeyType %q is not Image, Registry or Global", resp.CacheKeyType)
	}
	if resp.CacheDuration != nil && resp.CacheDuration.Duration < 0 {
		return nil, fmt.Errorf("the answer's cacheDuration %s is negative", resp.CacheDuration.Duration)
	}
	for key := range resp.Auth {
		if err := validGlob(key); err != nil {
			return nil, fmt.Errorf("the answer's auth key %q: %w", key, err)
		}
	}
	return &resp, nil
}

// limitedBuffer keeps at most max bytes and remembers that more came.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.Len(); len(p) > room {
		l.over = true
		if room > 0 {
			l.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return l.Buffer.Write(p)
}
