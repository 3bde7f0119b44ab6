package controlplane

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"brewlet.sh/brewlet/internal/metricsauth"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// Metrics name every node, pod and container Brewlet serves, so both components serve them
// only to callers the API server authenticates and authorizes for get /metrics
// (internal/metricsauth, the same filter in the operator's metrics server and the agent's):
// no token, an unknown token and a token without the right are refused; a scraper bound to
// the chart's brewlet-metrics-reader role reads them.
func TestMetricsNeedATokenWithTheRight(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
	srv, err := metricsauth.Server(cp.Config, addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "brewlet_test_metric 1\n")
	}), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ListenAndServeTLS("", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	stranger := kit.SAToken(t, cp, "default", "stranger", false)
	kit.Eventually(t, 30*time.Second, "the metrics endpoint up", func() (bool, string) {
		_, code, err := kit.GetMetrics(addr, "")
		return err == nil && code != 0, fmt.Sprint(code, err)
	})
	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		// The API server's TokenReview reports an error for it; the filter answers 500, and
		// the metrics stay unread.
		{"a token the API server does not know", "not-a-token", http.StatusInternalServerError},
		{"a service account without the right", stranger, http.StatusForbidden},
		{"the scraper", kit.MetricsToken(t, cp), http.StatusOK},
	} {
		body, code, err := kit.GetMetrics(addr, tc.token)
		if err != nil || code != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.who, code, err, tc.want)
		}
		if code == http.StatusOK && !strings.Contains(body, "brewlet_test_metric 1") {
			t.Errorf("%s: body %q", tc.who, body)
		}
		if code != http.StatusOK && strings.Contains(body, "brewlet_test_metric") {
			t.Errorf("%s was refused but read the metrics: %q", tc.who, body)
		}
	}
}
