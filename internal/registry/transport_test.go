package registry

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A body that stops mid-transfer fails with a StallError after the stall timeout, while a
// body that keeps moving slowly (each gap shorter than the timeout) is read to the end.
func TestTransportStallTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "8")
		_, _ = w.Write([]byte("half"))
		w.(http.Flusher).Flush()
		if r.URL.Path == "/stall" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		for _, c := range "slow" {
			time.Sleep(150 * time.Millisecond)
			_, _ = w.Write([]byte(string(c)))
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	defer close(release)
	c := &http.Client{Transport: Transport(Timeouts{Stall: 400 * time.Millisecond})}

	resp, err := c.Get(srv.URL + "/stall")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var se *StallError
	if !errors.As(err, &se) || string(got) != "half" {
		t.Fatalf("stalled body: read %q, err %v; want a StallError after the first half", got, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("stall detected after %s; want about 400ms", d)
	}
	if !strings.Contains(se.Error(), "/stall") || !strings.Contains(se.Error(), "400ms") {
		t.Fatalf("message %q should name the URL and the timeout", se.Error())
	}

	resp, err = c.Get(srv.URL + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(got) != "halfslow" {
		t.Fatalf("slow but moving body: %q %v", got, err)
	}
}

// A server that accepts the request and never answers is cut off by the response-header
// timeout.
func TestTransportResponseHeaderTimeout(t *testing.T) {
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(done)
	c := &http.Client{Transport: Transport(Timeouts{ResponseHeader: 300 * time.Millisecond})}
	start := time.Now()
	resp, err := c.Get(srv.URL)
	if err == nil {
		_ = resp.Body.Close()
	}
	if err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("silent server: err %v after %s; want a timeout after about 300ms", err, time.Since(start))
	}
}

func TestTimeoutDefaults(t *testing.T) {
	got := Timeouts{Stall: time.Second}.withDefaults()
	if got.Stall != time.Second || got.Dial != DefaultTimeouts.Dial || got.ResponseHeader != DefaultTimeouts.ResponseHeader {
		t.Fatalf("defaults: %+v", got)
	}
}
