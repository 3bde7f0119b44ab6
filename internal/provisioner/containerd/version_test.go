package containerd

import (
	"strings"
	"testing"

	"brewlet.sh/brewlet/internal/vocab"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		out       string
		want      string
		major     int
		supported bool
	}{
		{"containerd github.com/containerd/containerd/v2 v2.4.2 \n", "v2.4.2", 2, true},
		{"containerd github.com/containerd/containerd/v2 v2.0.14 abcdef0\n", "v2.0.14", 2, true},
		{"containerd github.com/containerd/containerd v1.7.35 1234\n", "v1.7.35", 1, false},
		{"containerd containerd.io 1.7.24~ds1 \n", "v1.7.24~ds1", 1, false},
		{"containerd github.com/containerd/containerd/v2 2.0.5-1 \n", "v2.0.5-1", 2, true},
		{"containerd github.com/containerd/containerd/v2 v2.2.0+unknown\n", "v2.2.0+unknown", 2, true},
		{"containerd github.com/containerd/containerd/v2 v3.0.0\nsecond line\n", "v3.0.0", 3, true},
		// k3s and RKE2 build containerd from their own fork.
		{"containerd github.com/k3s-io/containerd v2.0.5-k3s1 \n", "v2.0.5-k3s1", 2, true},
		{"containerd github.com/k3s-io/containerd v1.7.27-k3s1 \n", "v1.7.27-k3s1", 1, false},
	} {
		v, err := ParseVersion([]byte(tc.out))
		if err != nil || v.Text != tc.want || v.Major != tc.major {
			t.Errorf("%q: %+v %v", tc.out, v, err)
			continue
		}
		err = Supported(v, "/usr/bin/containerd")
		if (err == nil) != tc.supported {
			t.Errorf("%q: supported %v", tc.out, err)
		}
		if err != nil && (vocab.ReasonOf(err) != vocab.ReasonContainerdUnsupported || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: refusal names neither reason nor version: %v", tc.out, err)
		}
	}
	for _, bad := range []string{
		"", "containerd", "containerd x", "runc version 1.3.7", "containerd m vX.Y.Z",
		"containerd m v2.4", "containerd m v2.4.2.1", "containerd m v02.4.2", "containerd m v-2.4.2",
		"containerd m v2..2", strings.Repeat("x", 5000),
	} {
		if v, err := ParseVersion([]byte(bad)); err == nil {
			t.Errorf("%q accepted as %+v", bad, v)
		}
	}
}

// The version line comes from a program on the node: whatever it prints, parsing ends with
// a bounded version or an error.
func FuzzParseVersion(f *testing.F) {
	f.Add([]byte("containerd github.com/containerd/containerd/v2 v2.4.2 \n"))
	f.Add([]byte("containerd containerd.io 1.7.24~ds1 \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseVersion(b)
		if err != nil {
			return
		}
		if v.Major < 0 || v.Minor < 0 || v.Patch < 0 || len(v.Text) > 64 || !strings.HasPrefix(v.Text, "v") {
			t.Fatalf("%q parsed as %+v", b, v)
		}
	})
}
