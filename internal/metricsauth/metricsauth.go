// Package metricsauth puts a component's Prometheus endpoint behind the cluster's own
// authentication and authorization, as the Kubernetes components do: the scraper presents a
// bearer token (TokenReview) whose user may `get` the non-resource URL /metrics
// (SubjectAccessReview), over TLS with a certificate the component makes for itself. Metrics
// name every node, pod and container Brewlet serves; nobody without that right reads them.
package metricsauth

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Filter is controller-runtime's TokenReview + SubjectAccessReview filter, the one the
// operator's metrics server uses too.
var Filter func(*rest.Config, *http.Client) (metricsserver.Filter, error) = filters.WithAuthenticationAndAuthorization

// Server serves h at addr over TLS, allowing only requests the API server authenticates and
// authorizes for `get` on the request's path.
func Server(cfg *rest.Config, addr string, h http.Handler, log logr.Logger) (*http.Server, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("metrics: API client: %w", err)
	}
	f, err := Filter(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics: authentication and authorization: %w", err)
	}
	protected, err := f(log, h)
	if err != nil {
		return nil, fmt.Errorf("metrics: authentication and authorization: %w", err)
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("brewlet-metrics", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics: serving certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("metrics: serving certificate: %w", err)
	}
	return &http.Server{Addr: addr, Handler: protected, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}, nil
}
