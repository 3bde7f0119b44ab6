package registry

import (
	"strings"
	"testing"

	"brewlet.sh/brewlet/internal/vocab"
)

const dg = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestDigest(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		http bool
	}{
		{"registry.example/runtimes/python@" + dg, true, false},
		{"127.0.0.1:5000/runtimes/python@" + dg, true, true},
		{"localhost:5000/python@" + dg, true, true},
		{"registry.example/python:3.12", false, false},
		{"registry.example/python:3.12@" + dg, false, false},
		{"registry.example/python@sha256:abc", false, false},
		{"", false, false},
	} {
		d, err := Digest(tc.in, false)
		if (err == nil) != tc.ok {
			t.Errorf("Digest(%q) = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if err != nil {
			if vocab.ReasonOf(err) != vocab.ReasonInvalidImageReference {
				t.Errorf("Digest(%q) reason %q", tc.in, vocab.ReasonOf(err))
			}
			continue
		}
		if got := d.Context().Scheme() == "http"; got != tc.http {
			t.Errorf("Digest(%q) plain http = %v, want %v", tc.in, got, tc.http)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for h, want := range map[string]bool{"127.0.0.1:5000": true, "localhost": true, "[::1]:80": true, "10.0.0.1:5000": false, "registry.example": false} {
		if IsLoopback(h) != want {
			t.Errorf("IsLoopback(%q) != %v", h, want)
		}
	}
}

func FuzzDigest(f *testing.F) {
	f.Add("registry.example/python@" + dg)
	f.Add("registry.example/python:1@" + dg)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Digest(s, false)
		if err == nil && (!strings.HasPrefix(d.DigestStr(), "sha256:") || strings.Contains(d.Context().RepositoryStr(), ":")) {
			t.Fatalf("accepted %q as %v", s, d)
		}
	})
}
