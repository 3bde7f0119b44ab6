package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Rotator keeps the serving certificate of pod admission: the Secret in the operator's
// namespace is the shared memory of every replica (created, renewed and rotated with
// writes conditional on its resourceVersion, so replicas never fight), each replica serves
// the Secret's certificate and writes it to its cert dir, and the webhook configuration's
// caBundle is kept equal to the Secret's CA bundle.
//
// Every replica runs it (no leader election): each must serve a current certificate.
type Rotator struct {
	Reader client.Reader // the API server, not a cache: a lagging cache could roll back a rotation
	Writer client.Client
	Log    logr.Logger

	Namespace, SecretName, ConfigurationName string
	CertDir                                  string
	Policy                                   CertPolicy
	Interval                                 time.Duration // between passes (default 1 minute)
	Now                                      func() time.Time

	mu   sync.RWMutex
	cert *tls.Certificate
	ca   []byte
}

// NeedLeaderElection: every replica serves the webhook and needs its certificate.
func (r *Rotator) NeedLeaderElection() bool { return false }

// GetCertificate is the TLS server's certificate source: the certificate of the last pass,
// swapped in memory without a restart or a file watch.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.cert == nil {
		return nil, fmt.Errorf("pod admission: no serving certificate yet")
	}
	return r.cert, nil
}

// CABundle returns the CA bundle the served certificate chains to (nil before the first
// pass).
func (r *Rotator) CABundle() []byte {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return bytes.Clone(r.ca)
}

// Ready fails until a serving certificate is loaded (the operator's /readyz).
func (r *Rotator) Ready() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.cert == nil {
		return fmt.Errorf("pod admission serving certificate not loaded")
	}
	return nil
}

// Start loads the certificate a previous run left in the cert dir (so a restarted replica
// serves at once even while the API server is slow), then passes every Interval; a failed
// pass is retried sooner.
func (r *Rotator) Start(ctx context.Context) error {
	interval := r.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	r.loadFiles()
	retry := 500 * time.Millisecond
	for {
		wait := interval
		if err := r.Pass(ctx); err != nil {
			r.Log.Error(err, "pod admission certificate pass failed; retrying", "in", retry)
			wait, retry = retry, min(2*retry, interval)
		} else {
			retry = 500 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Pass reads the Secret, renews what is due, writes it back if it changed, serves and
// writes the result, and brings the webhook configuration's caBundle up to date.
func (r *Rotator) Pass(ctx context.Context) error {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	sec := &corev1.Secret{}
	key := types.NamespacedName{Namespace: r.Namespace, Name: r.SecretName}
	err := r.Reader.Get(ctx, key, sec)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read Secret %s: %w", key, err)
	}
	data, changed, dropped, err := RenewSecret(sec.Data, r.Policy, now())
	if err != nil {
		return fmt.Errorf("renew the pod admission certificate in Secret %s: %w", key, err)
	}
	if changed {
		sec.Data = data
		if exists {
			// Update carries the resourceVersion read above: a replica that renewed first
			// wins and this one adopts its result on the retry (what it generated was
			// never published, and its CA key is already gone).
			err = r.Writer.Update(ctx, sec)
		} else {
			sec.ObjectMeta = metav1.ObjectMeta{Namespace: r.Namespace, Name: r.SecretName,
				Labels: map[string]string{"app.kubernetes.io/part-of": "brewlet", "app.kubernetes.io/component": "pod-admission"}}
			sec.Type = corev1.SecretTypeOpaque
			err = r.Writer.Create(ctx, sec)
		}
		if err != nil {
			return fmt.Errorf("write Secret %s: %w", key, err)
		}
		r.Log.Info("pod admission certificate renewed", "secret", key.String())
		if len(dropped) > 0 {
			r.Log.Info("removed keys this version does not keep from the certificate Secret (a CA private key of an earlier version once its CA left the caBundle)",
				"secret", key.String(), "keys", dropped)
		}
	}
	b := Bundle{CABundle: data[KeyCABundle], Cert: data[KeyCert], Key: data[KeyKey]}
	// The caBundle first, then the certificate: a certificate of a CA just created (first
	// run, or an unusable one replaced) meets an API server that already trusts it as far
	// as this replica can arrange.
	patchErr := r.patchCABundle(ctx, b.CABundle)
	if err := r.install(b); err != nil {
		return err
	}
	return patchErr
}

func (r *Rotator) install(b Bundle) error {
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	if r.CertDir != "" {
		if err := os.MkdirAll(r.CertDir, 0o700); err != nil {
			return err
		}
		for name, data := range map[string][]byte{KeyCert: b.Cert, KeyKey: b.Key, KeyCABundle: b.CABundle} {
			if err := writeIfChanged(filepath.Join(r.CertDir, name), data); err != nil {
				return err
			}
		}
	}
	r.mu.Lock()
	r.cert, r.ca = &pair, bytes.Clone(b.CABundle)
	r.mu.Unlock()
	return nil
}

func (r *Rotator) loadFiles() {
	if r.CertDir == "" {
		return
	}
	crt, err1 := os.ReadFile(filepath.Join(r.CertDir, KeyCert))
	key, err2 := os.ReadFile(filepath.Join(r.CertDir, KeyKey))
	ca, _ := os.ReadFile(filepath.Join(r.CertDir, KeyCABundle))
	if err1 != nil || err2 != nil {
		return
	}
	if pair, err := tls.X509KeyPair(crt, key); err == nil {
		r.mu.Lock()
		r.cert, r.ca = &pair, ca
		r.mu.Unlock()
	}
}

// writeIfChanged replaces a file atomically (temp file + rename), so a reader never sees a
// certificate without its key half-written.
func writeIfChanged(path string, data []byte) error {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// patchCABundle sets every webhook of the configuration to the Secret's CA bundle. A
// missing configuration is not an error: the chart (or a test) may create it later, and
// the next pass patches it.
func (r *Rotator) patchCABundle(ctx context.Context, bundle []byte) error {
	if r.ConfigurationName == "" {
		return nil
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	err := r.Reader.Get(ctx, types.NamespacedName{Name: r.ConfigurationName}, cfg)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read MutatingWebhookConfiguration %s: %w", r.ConfigurationName, err)
	}
	changed := false
	for i := range cfg.Webhooks {
		if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, bundle) {
			cfg.Webhooks[i].ClientConfig.CABundle = bytes.Clone(bundle)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	// Update with the resourceVersion read: an edit in between is never overwritten.
	if err := r.Writer.Update(ctx, cfg); err != nil {
		return fmt.Errorf("update caBundle of %s: %w", r.ConfigurationName, err)
	}
	r.Log.Info("pod admission caBundle updated", "configuration", r.ConfigurationName)
	return nil
}
