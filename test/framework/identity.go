package framework

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// UserClient is a client authenticated by a client certificate the control plane's CA
// issues for user name in groups: a kubelet (system:node:<name> in system:nodes, which
// the Node authorizer and NodeRestriction judge) or an ordinary person.
func (cp *ControlPlane) UserClient(t TB, name string, groups ...string) client.Client {
	t.Helper()
	dir := filepath.Join(cp.Dir, "users", fmt.Sprintf("%x", name))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	crt, key, err := cp.issueClient(dir, name, groups...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(&rest.Config{Host: cp.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAFile: cp.pki.CACert, CertFile: crt, KeyFile: key}}, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// KubeletClient is UserClient for the kubelet of node.
func (cp *ControlPlane) KubeletClient(t TB, node string) client.Client {
	return cp.UserClient(t, "system:node:"+node, "system:nodes")
}

// issueClient writes <dir>/client.crt and .key: a client certificate of the control
// plane's CA for user name in groups.
func (cp *ControlPlane) issueClient(dir, name string, groups ...string) (crt, key string, err error) {
	return cp.pki.IssueIn(dir, "client", pkix.Name{CommonName: name, Organization: groups}, nil, nil, x509.ExtKeyUsageClientAuth)
}
