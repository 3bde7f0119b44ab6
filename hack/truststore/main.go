// Command truststore writes a Java truststore (PKCS#12, the JDK's default keystore type)
// holding the certificates of a PEM bundle as trusted-certificate entries, neither encrypted
// nor integrity-protected: the JVM opens its default truststore without a password, so an
// encrypted certificate bag would load no CA at all (a password-based MAC adds nothing on
// a read-only image layer whose digest is pinned). hack/runtimes.sh uses it for the JRE
// runtime image: Debian builds /etc/ssl/certs/java/cacerts in ca-certificates-java's
// maintainer script, which runs Java; a runtime image is built without running any of its
// code. The encoding is go-pkcs12's, which marks entries trusted for any purpose the way
// Java's keytool does.
//
//	go run ./hack/truststore -o cacerts /etc/ssl/certs/ca-certificates.crt
package main

import (
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	pkcs12 "software.sslmate.com/src/go-pkcs12"
)

func main() {
	out := flag.String("o", "cacerts", "output file")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: truststore -o FILE BUNDLE.pem")
		os.Exit(2)
	}
	certs, err := readBundle(flag.Arg(0))
	if err != nil {
		fail(err)
	}
	der, err := pkcs12.Passwordless.EncodeTrustStore(certs, "")
	if err != nil {
		fail(err)
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fail(err)
	}
	if err := os.WriteFile(*out, der, 0o644); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "truststore: %d certificates in %s\n", len(certs), *out)
}

// readBundle parses every certificate of a PEM bundle; anything else in it is an error.
func readBundle(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: unexpected PEM block %q", path, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s: no certificate", path)
	}
	return certs, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "truststore:", err)
	os.Exit(1)
}
