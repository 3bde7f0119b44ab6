package kit

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"brewlet.sh/brewlet/test/framework"
)

// GetMetrics reads https://addr/metrics with token (none when ""); the endpoint's
// certificate is self-signed, as Kubernetes components' are.
func GetMetrics(addr, token string) (string, int, error) {
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return "", 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed metrics certificate on loopback
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// ScrapeMetrics reads a component's /metrics as the cluster's scraper would.
func ScrapeMetrics(t *testing.T, cp *framework.ControlPlane, addr string) (string, error) {
	t.Helper()
	body, code, err := GetMetrics(addr, MetricsToken(t, cp))
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("/metrics: %d %s", code, body)
	}
	return body, err
}

var scrapers sync.Map // *framework.ControlPlane -> token

// MetricsToken is a token of a scraper service account bound to a role like the chart's
// brewlet-metrics-reader (get /metrics), made once per control plane.
func MetricsToken(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	if tok, ok := scrapers.Load(cp); ok {
		return tok.(string)
	}
	tok := SAToken(t, cp, "default", "metrics-scraper", true)
	scrapers.Store(cp, tok)
	return tok
}
