package images

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bundle is the package's files in name order, each ending in a newline; a missing
// package is a clear error, not an image without authorities.
func TestCABundle(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"b.crt": "B\n", "a.crt": "A", "c.txt": "C\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := CABundle(dir)
	if err != nil || string(got) != "A\nB\n" {
		t.Fatalf("CABundle = %q, %v", got, err)
	}
	if _, err := CABundle(t.TempDir()); err == nil || !strings.Contains(err.Error(), "ca-certificates") {
		t.Fatalf("empty directory: %v", err)
	}
	if _, err := os.Stat(DebianCADir); err == nil {
		b, err := CABundle(DebianCADir)
		if err != nil || !x509.NewCertPool().AppendCertsFromPEM(b) {
			t.Fatalf("the machine's package bundle: %v", err)
		}
	}
}
