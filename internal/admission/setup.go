package admission

import (
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Options configure pod admission in the operator. Port 0 turns it off (the default, so
// an operator without a namespace to keep its certificate in still starts).
type Options struct {
	// Host and Port the webhook server listens on (Port 0: no webhook).
	Host string
	Port int
	// CertDir receives tls.crt, tls.key and ca.crt of the current serving certificate
	// (default: controller-runtime's <tmp>/k8s-webhook-server/serving-certs).
	CertDir string
	// Namespace of the certificate Secret: the operator's own (required with Port).
	Namespace string
	// SecretName (default SecretName) and ConfigurationName, the MutatingWebhookConfiguration
	// whose caBundle the operator keeps current (default ConfigurationName).
	SecretName, ConfigurationName string
	// Hosts the serving certificate names (default: ServiceName's DNS names in Namespace).
	Hosts []string
	// CertValidity: the serving certificate's lifetime (default 90 days), renewed with a
	// third left. Each certificate has a CA of its own that lives exactly as long and whose
	// key is never kept, so there is no CA lifetime to set.
	CertValidity time.Duration
	// ResyncInterval between certificate passes (default 1 minute).
	ResyncInterval time.Duration
	// UserNamespaces is the policy for Brewlet pods' hostUsers (default: the pod decides).
	UserNamespaces UserNamespaces
}

// Setup adds the webhook server with the pod admission handler and the certificate
// Rotator to the manager, and a /readyz check that holds until a certificate is served.
// It returns the Rotator (tests read its CA bundle), nil when admission is off.
func Setup(mgr manager.Manager, o Options) (*Rotator, error) {
	if o.Port == 0 {
		return nil, nil
	}
	if o.Namespace == "" {
		return nil, errors.New("pod admission: the operator namespace (for the certificate Secret) is required")
	}
	if o.SecretName == "" {
		o.SecretName = SecretName
	}
	if o.ConfigurationName == "" {
		o.ConfigurationName = ConfigurationName
	}
	if o.CertDir == "" {
		// controller-runtime's default, so the files are where its users look for them.
		o.CertDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	}
	if len(o.Hosts) == 0 {
		svc := ServiceName + "." + o.Namespace
		o.Hosts = []string{svc + ".svc", svc, svc + ".svc.cluster.local"}
	}
	rot := &Rotator{
		Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Log: mgr.GetLogger().WithName("pod-admission-certs"),
		Namespace: o.Namespace, SecretName: o.SecretName, ConfigurationName: o.ConfigurationName,
		CertDir: o.CertDir, Interval: o.ResyncInterval,
		Policy: CertPolicy{CertValidity: o.CertValidity, Resync: o.ResyncInterval, Hosts: o.Hosts},
	}
	srv := webhook.NewServer(webhook.Options{
		Host: o.Host, Port: o.Port, CertDir: o.CertDir,
		// The certificate comes from the Rotator's memory: no dependency on a file watch
		// and none on files existing before the server starts.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.GetCertificate = rot.GetCertificate
			c.MinVersion = tls.VersionTLS12
		}},
	})
	srv.Register(Path, &admission.Webhook{Handler: &Handler{Cache: mgr.GetClient(), Direct: mgr.GetAPIReader(), UserNamespaces: o.UserNamespaces}})
	if err := mgr.Add(srv); err != nil {
		return nil, err
	}
	if err := mgr.Add(rot); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("pod-admission-certificate", func(*http.Request) error { return rot.Ready() }); err != nil {
		return nil, err
	}
	return rot, nil
}
