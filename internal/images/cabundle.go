package images

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// DebianCADir holds the authorities Debian's ca-certificates package ships, one PEM file
// each. The package owns these files; /etc/ssl/certs/ca-certificates.crt, which
// update-ca-certificates builds from them, may also hold authorities the build machine's
// administrator added, which have no place in an image others run.
const DebianCADir = "/usr/share/ca-certificates/mozilla"

// CABundlePath is where the images hold the bundle: the first file Go's crypto/x509 reads
// on Linux, and where Debian-based tools look.
const CABundlePath = "etc/ssl/certs/ca-certificates.crt"

// CABundle concatenates the package's authorities in name order, as
// update-ca-certificates does: the same package version gives the same bytes, and a
// rebuild after Debian updates the package carries its update.
func CABundle(dir string) ([]byte, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.crt"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CA certificates in %s: install Debian's ca-certificates package (hack/tools.sh does); without them the images could reach no registry over TLS", dir)
	}
	slices.Sort(files)
	var out bytes.Buffer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out.Write(b)
		if !bytes.HasSuffix(b, []byte("\n")) {
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), nil
}
