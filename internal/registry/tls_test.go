package registry

import (
	"context"
	"errors"
	"net/http"
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

func TestRequireTLS(t *testing.T) {
	for _, tc := range []struct {
		url      string
		insecure bool
		refused  bool
	}{
		{"https://registry.example/v2/", false, false},
		{"https://10.1.2.3:5000/v2/", false, false},
		{"http://10.1.2.3:5000/v2/", false, true},
		{"http://192.168.1.1/v2/", false, true},
		{"http://registry.example/v2/", false, true},
		{"http://127.0.0.1:5000/v2/", false, false},
		{"http://localhost:5000/v2/", false, false},
		{"http://[::1]:5000/v2/", false, false},
		{"http://10.1.2.3:5000/v2/", true, false},
	} {
		rec := &recorder{}
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := RequireTLS(rec, tc.insecure).RoundTrip(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		var pe *PlainHTTPError
		if refused := errors.As(err, &pe); refused != tc.refused || (tc.refused && len(rec.seen) != 0) {
			t.Errorf("%s insecure=%v: error %v, base saw %v; want refused=%v", tc.url, tc.insecure, err, rec.seen, tc.refused)
		}
	}
}

// go-containerregistry falls back to plain HTTP for a registry on a private address even
// when the reference was not made insecure; RequireTLS keeps that request off the wire.
func TestRequireTLSStopsThePrivateAddressFallback(t *testing.T) {
	ref, err := Reference("10.255.255.1:5000/runtimes/python:1", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, insecure := range []bool{false, true} {
		rec := &recorder{}
		_, err = remote.Get(ref, remote.WithContext(context.Background()), remote.WithTransport(RequireTLS(rec, insecure)))
		var pe *PlainHTTPError
		plain := false
		for _, s := range rec.seen {
			plain = plain || s == "http://10.255.255.1:5000"
		}
		if insecure != plain || insecure == errors.As(err, &pe) {
			t.Errorf("insecure=%v: plain HTTP sent %v (seen %v), error %v", insecure, plain, rec.seen, err)
		}
	}
}
