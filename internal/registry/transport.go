package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"golang.org/x/net/http/httpproxy"
)

// Timeouts bound every phase of a registry call, so a registry or mirror that accepts a
// connection and then goes quiet cannot hold a node's install (and whatever waits behind
// it) for ever. Zero fields take the defaults of DefaultTimeouts.
type Timeouts struct {
	Dial           time.Duration // TCP connect
	TLSHandshake   time.Duration
	ResponseHeader time.Duration // request sent until the status line and headers arrive
	Idle           time.Duration // an idle keep-alive connection is closed after this
	// Stall bounds the wait for the next bytes of a response body. A body may take as long
	// as it needs in total (the caller's deadline bounds that) as long as it keeps moving.
	Stall time.Duration
}

// DefaultTimeouts suit a registry on the far side of a slow link: generous for one round
// trip, far shorter than an install's deadline.
var DefaultTimeouts = Timeouts{
	Dial:           10 * time.Second,
	TLSHandshake:   10 * time.Second,
	ResponseHeader: 30 * time.Second,
	Idle:           90 * time.Second,
	Stall:          30 * time.Second,
}

func (t Timeouts) withDefaults() Timeouts {
	d := DefaultTimeouts
	pick := func(v, def time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return def
	}
	return Timeouts{Dial: pick(t.Dial, d.Dial), TLSHandshake: pick(t.TLSHandshake, d.TLSHandshake),
		ResponseHeader: pick(t.ResponseHeader, d.ResponseHeader), Idle: pick(t.Idle, d.Idle), Stall: pick(t.Stall, d.Stall)}
}

// Transport is an HTTP transport with every timeout of t set, whose response bodies fail
// with a *StallError when no byte arrives for t.Stall. It trusts the system's authorities.
func Transport(t Timeouts) http.RoundTripper { return TransportTLS(t, nil) }

// TransportTLS is Transport with a TLS client configuration of the caller's (nil: Go's
// default, the system's authorities).
func TransportTLS(t Timeouts, tlsConfig *tls.Config) http.RoundTripper {
	t = t.withDefaults()
	base := &http.Transport{
		TLSClientConfig: tlsConfig,
		// Read when the transport is made (http.ProxyFromEnvironment reads the environment
		// once per process): HTTPS_PROXY, HTTP_PROXY, NO_PROXY; loopback is never proxied.
		Proxy:                 proxyFunc(httpproxy.FromEnvironment().ProxyFunc()),
		DialContext:           (&net.Dialer{Timeout: t.Dial, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   50,
		IdleConnTimeout:       t.Idle,
		TLSHandshakeTimeout:   t.TLSHandshake,
		ResponseHeaderTimeout: t.ResponseHeader,
		ExpectContinueTimeout: time.Second,
	}
	return &stallTransport{base: base, stall: t.Stall}
}

func proxyFunc(f func(*url.URL) (*url.URL, error)) func(*http.Request) (*url.URL, error) {
	return func(r *http.Request) (*url.URL, error) { return f(r.URL) }
}

// StallError is a response body that stopped moving.
type StallError struct {
	URL   string
	After time.Duration
}

func (e *StallError) Error() string {
	return fmt.Sprintf("%s sent no data for %s (read stall timeout); the registry or the network stopped mid-transfer", e.URL, e.After)
}

type stallTransport struct {
	base  http.RoundTripper
	stall time.Duration
}

func (s *stallTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// The request gets a context of its own so a stalled body can be cut off: cancelling
	// it makes the blocked Read return at once.
	ctx, cancel := context.WithCancel(req.Context())
	resp, err := s.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	b := &stallBody{rc: resp.Body, cancel: cancel, url: req.URL.Redacted(), after: s.stall}
	b.timer = time.AfterFunc(s.stall, b.fire)
	b.timer.Stop() // armed only while a Read waits
	resp.Body = b
	return resp, nil
}

// stallBody arms a timer around each Read: time spent by the consumer between reads
// (writing to disk) never counts against the registry.
type stallBody struct {
	rc     io.ReadCloser
	cancel context.CancelFunc
	timer  *time.Timer
	url    string
	after  time.Duration

	mu      sync.Mutex
	stalled bool
}

func (b *stallBody) fire() {
	b.mu.Lock()
	b.stalled = true
	b.mu.Unlock()
	b.cancel()
}

func (b *stallBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.after)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF {
		b.mu.Lock()
		stalled := b.stalled
		b.mu.Unlock()
		if stalled {
			return n, &StallError{URL: b.url, After: b.after}
		}
	}
	return n, err
}

func (b *stallBody) Close() error {
	b.timer.Stop()
	err := b.rc.Close()
	b.cancel()
	return err
}

// PlainHTTPError is a registry that answered TLS with plain HTTP where the policy allows
// only TLS.
type PlainHTTPError struct{ Host string }

func (e *PlainHTTPError) Error() string {
	return fmt.Sprintf("registry %s answered with plain HTTP and plain HTTP is refused: only loopback registries are reached without TLS unless insecure registries are allowed (brewlet-provisioner --insecure-registries, chart value provisioner.registry.insecure)", e.Host)
}

// RequireTLS sends every request over TLS, whatever scheme the registry client chose:
// go-containerregistry picks plain HTTP by itself for loopback, private (RFC 1918) and
// .local registries, which would make a TLS registry at a private address unreachable and
// send requests in the clear. Only a loopback registry, or any when insecure, may then be
// reached over plain HTTP, and only after it answered TLS with plain HTTP (containerd's
// own fallback, remembered per host). Redirects go through here too.
func RequireTLS(base http.RoundTripper, insecure bool) http.RoundTripper {
	return &tlsFirst{base: base, insecure: insecure}
}

type tlsFirst struct {
	base     http.RoundTripper
	insecure bool
	fallback sync.Map // host -> http.RoundTripper (containerd's https-then-http fallback)
}

func (t *tlsFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		return t.base.RoundTrip(req)
	}
	u := *req.URL
	u.Scheme = "https"
	r := req.Clone(req.Context())
	r.URL = &u
	if t.insecure || IsLoopback(req.URL.Host) {
		f, _ := t.fallback.LoadOrStore(req.URL.Host, docker.NewHTTPFallback(t.base))
		return f.(http.RoundTripper).RoundTrip(r)
	}
	resp, err := t.base.RoundTrip(r)
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) && string(rh.RecordHeader[:]) == "HTTP/" {
		return nil, &PlainHTTPError{Host: req.URL.Host}
	}
	return resp, err
}
