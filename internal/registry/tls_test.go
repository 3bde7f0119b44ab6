package registry

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// recorder fails every request it sees and remembers its URL.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.seen = append(r.seen, req.URL.Scheme+"://"+req.URL.Host)
	r.mu.Unlock()
	return nil, errors.New("no network in this test")
}

// Every request leaves over TLS; a plain-HTTP URL the client chose is upgraded. Only
// loopback registries, or any when insecure, may fall back to plain HTTP (tested against
// real servers in TestRequireTLSFallback).
func TestRequireTLS(t *testing.T) {
	for _, tc := range []struct {
		url      string
		insecure bool
		sent     string
	}{
		{"https://registry.example/v2/", false, "https://registry.example"},
		{"https://10.1.2.3:5000/v2/", false, "https://10.1.2.3:5000"},
		{"http://10.1.2.3:5000/v2/", false, "https://10.1.2.3:5000"},
		{"http://192.168.1.1/v2/", false, "https://192.168.1.1"},
		{"http://registry.example/v2/", false, "https://registry.example"},
		{"http://127.0.0.1:5000/v2/", false, "https://127.0.0.1:5000"},
		{"http://10.1.2.3:5000/v2/", true, "https://10.1.2.3:5000"},
	} {
		rec := &recorder{}
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, _ := RequireTLS(rec, tc.insecure).RoundTrip(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		if len(rec.seen) == 0 || rec.seen[0] != tc.sent {
			t.Errorf("%s insecure=%v: sent %v, want first %s", tc.url, tc.insecure, rec.seen, tc.sent)
		}
	}
}

// go-containerregistry picks plain HTTP by itself for a registry on a private address even
// when the reference was not made insecure; RequireTLS sends that request over TLS.
func TestRequireTLSStopsThePrivateAddressFallback(t *testing.T) {
	ref, err := Reference("10.255.255.1:5000/runtimes/python:1", false)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	_, _ = remote.Get(ref, remote.WithContext(context.Background()), remote.WithTransport(RequireTLS(rec, false)))
	for _, s := range rec.seen {
		if s != "https://10.255.255.1:5000" {
			t.Errorf("sent to %s; want only https://10.255.255.1:5000", s)
		}
	}
	if len(rec.seen) == 0 {
		t.Error("nothing sent")
	}
}

// A plain-HTTP server: refused (PlainHTTPError, no request in the clear) at a non-loopback
// address unless insecure; reached at loopback after its plain answer to TLS.
func TestRequireTLSFallback(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	loop := "http://127.0.0.1:" + port + "/v2/"
	for _, tc := range []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{loop, false, true},
		{loop, true, true},
	} {
		req, _ := http.NewRequest(http.MethodGet, tc.url, nil)
		resp, err := RequireTLS(http.DefaultTransport, tc.insecure).RoundTrip(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s insecure=%v: %v", tc.url, tc.insecure, err)
		}
	}
	// Not loopback (the server's address seen through a transport that dials it for any
	// name): the plain answer is refused.
	dial := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}}
	req, _ := http.NewRequest(http.MethodGet, "http://registry.example/v2/", nil)
	resp, err := RequireTLS(dial, false).RoundTrip(req)
	if resp != nil {
		_ = resp.Body.Close()
	}
	var pe *PlainHTTPError
	if !errors.As(err, &pe) || pe.Host != "registry.example" {
		t.Errorf("plain answer from a non-loopback registry: %v; want PlainHTTPError", err)
	}
	req, _ = http.NewRequest(http.MethodGet, "http://registry.example/v2/", nil)
	resp, err = RequireTLS(dial, true).RoundTrip(req)
	if err != nil {
		t.Errorf("insecure: %v", err)
	} else {
		_ = resp.Body.Close()
	}
}
