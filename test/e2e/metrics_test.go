package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"brewlet.sh/brewlet/internal/metricsauth"
	"brewlet.sh/brewlet/test/framework"
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

	stranger := saToken(t, cp, "default", "stranger", false)
	eventually(t, 30*time.Second, "the metrics endpoint up", func() (bool, string) {
		_, code, err := getMetrics(addr, "")
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
		{"the scraper", metricsToken(t, cp), http.StatusOK},
	} {
		body, code, err := getMetrics(addr, tc.token)
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

// getMetrics reads https://addr/metrics with token (none when ""); the endpoint's
// certificate is self-signed, as Kubernetes components' are.
func getMetrics(addr, token string) (string, int, error) {
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

// scrapeMetrics reads a component's /metrics as the cluster's scraper would.
func scrapeMetrics(t *testing.T, cp *framework.ControlPlane, addr string) (string, error) {
	t.Helper()
	body, code, err := getMetrics(addr, metricsToken(t, cp))
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("/metrics: %d %s", code, body)
	}
	return body, err
}

var scrapers sync.Map // *framework.ControlPlane -> token

// metricsToken is a token of a scraper service account bound to a role like the chart's
// brewlet-metrics-reader (get /metrics), made once per control plane.
func metricsToken(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	if tok, ok := scrapers.Load(cp); ok {
		return tok.(string)
	}
	tok := saToken(t, cp, "default", "metrics-scraper", true)
	scrapers.Store(cp, tok)
	return tok
}

// saToken creates service account ns/name (bound to get /metrics when reader) and returns a
// token of it.
func saToken(t *testing.T, cp *framework.ControlPlane, ns, name string, reader bool) string {
	t.Helper()
	ctx, c := context.Background(), cp.Client
	create := func(err error) {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	create(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}))
	if reader {
		create(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-metrics-reader"},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}))
		create(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-metrics-reader-" + ns + "-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "test-metrics-reader"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}))
	}
	return tokenOf(t, cp.Config, ns, name, nil)
}
