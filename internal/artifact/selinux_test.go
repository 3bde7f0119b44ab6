package artifact

import (
	"archive/tar"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/testutil"
	"brewlet.sh/brewlet/internal/vocab"
)

// Snapshot files on SELinux nodes carry the label the policy gives containerd's snapshots;
// that one label, and only it, is the node's. The kernel stores security.* attributes on
// ext4 and tmpfs for root even where no SELinux policy is loaded, which is how these
// layers get them.
func TestDirSELinuxLabels(t *testing.T) {
	testutil.RequireRoot(t, "security.* attributes need CAP_SYS_ADMIN")
	const node = "system_u:object_r:container_ro_file_t:s0"
	const other = "system_u:object_r:shadow_t:s0"
	layer := func(t *testing.T, labels map[string]string) string {
		d := t.TempDir()
		materialize(t, d, []ent{{name: "app/", typ: tar.TypeDir, mode: 0o755}, {name: "app/main.py", typ: tar.TypeReg, mode: 0o644}})
		for p, l := range labels {
			// As the kernel returns them: NUL-terminated.
			if err := unix.Lsetxattr(filepath.Join(d, p), SELinuxXattr, []byte(l+"\x00"), 0); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	everywhere := map[string]string{".": node, "app": node, "app/main.py": node}
	for _, tc := range []struct {
		name      string
		labels    map[string]string
		nodeLabel string
		want      string // "" = accepted, else a substring of the refusal
	}{
		{"no labels on a node without them", nil, "", ""},
		{"the node's label on every file", everywhere, node, ""},
		{"a label on a node that labels nothing", everywhere, "", `SELinux label "` + node + `"`},
		{"one file with a label of its own", map[string]string{".": node, "app": node, "app/main.py": other}, node, `"` + other + `"`},
		{"a prefix of the node's label", map[string]string{"app/main.py": "system_u:object_r:container_ro_file_t"}, node, "its own SELinux label"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := DefaultLimits()
			lim.NodeLabel = tc.nodeLabel
			err := ValidateDirLayers(context.Background(), []string{layer(t, tc.labels)}, nil, lim)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if vocab.ReasonOf(err) != vocab.ReasonLayerPathViolation || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want LayerPathViolation naming %s, got %v", tc.want, err)
			}
		})
	}
	t.Run("other attributes stay refused beside the node's label", func(t *testing.T) {
		d := layer(t, everywhere)
		if err := unix.Lsetxattr(filepath.Join(d, "app/main.py"), "security.ima", []byte{1}, 0); err != nil {
			t.Fatal(err)
		}
		lim := DefaultLimits()
		lim.NodeLabel = node
		err := ValidateDirLayers(context.Background(), []string{d}, nil, lim)
		if vocab.ReasonOf(err) != vocab.ReasonLayerPathViolation || !strings.Contains(err.Error(), "security.ima") ||
			strings.Contains(err.Error(), SELinuxXattr) {
			t.Fatalf("want security.ima refused alone, got %v", err)
		}
	})
	t.Run("ReadLabel", func(t *testing.T) {
		d := layer(t, map[string]string{".": node})
		if l, err := ReadLabel(d); err != nil || l != node {
			t.Fatalf("ReadLabel = %q, %v; want %q", l, err, node)
		}
		if l, err := ReadLabel(filepath.Join(d, "app")); err != nil || l != "" {
			t.Fatalf("unlabelled: ReadLabel = %q, %v", l, err)
		}
	})
}
