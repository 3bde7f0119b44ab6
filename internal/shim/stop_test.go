package shim

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/runc"
	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// deletedStop may skip runc only when `runc delete --force` would have found nothing: every
// other bundle gets the runc manager's full answer.
func TestDeletedStopOnlyForDeletedContainers(t *testing.T) {
	exitedAt := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	type bundle struct {
		runtime   string // "" writes no runtime file
		root      bool   // options.json names the private runc root
		stateDir  bool   // runc still keeps a directory for the container
		exit      string // exit.json; "" writes none
		options   string // options.json as written; overrides root
		namespace string
		id        string
	}
	good := `{"pid":42,"status":143,"timestamp":"` + exitedAt.Format(time.RFC3339Nano) + `"}`
	for _, tc := range []struct {
		name string
		b    bundle
		want bool
	}{
		{"deleted by the shim, runc by path", bundle{runtime: "/usr/local/sbin/runc", root: true, exit: good}, true},
		{"deleted by the shim, runc by name", bundle{runtime: "runc", root: true, exit: good}, true},
		{"deleted, default runtime file absent", bundle{root: true, exit: good}, true},
		{"runc still has the container (the shim died)", bundle{runtime: "runc", root: true, stateDir: true, exit: good}, false},
		{"another runtime binary", bundle{runtime: "/usr/bin/crun", root: true, exit: good}, false},
		{"runtime named like runc in a path", bundle{runtime: "/opt/runc/runsc", root: true, exit: good}, false},
		{"no exit recorded", bundle{runtime: "runc", root: true}, false},
		{"exit record unreadable", bundle{runtime: "runc", root: true, exit: "{"}, false},
		{"exit record without a pid", bundle{runtime: "runc", root: true, exit: `{"status":0,"timestamp":"` + exitedAt.Format(time.RFC3339Nano) + `"}`}, false},
		{"options unreadable", bundle{runtime: "runc", options: "{", exit: good}, false},
		{"no namespace", bundle{runtime: "runc", root: true, exit: good, namespace: "-"}, false},
		{"namespace leaving the root", bundle{runtime: "runc", root: true, exit: good, namespace: ".."}, false},
		{"id leaving the root", bundle{runtime: "runc", root: true, exit: good, id: "../c1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			runcRoot := filepath.Join(dir, "runc")
			id, ns := "c1", "k8s.io"
			if tc.b.id != "" {
				id = tc.b.id
			}
			b := filepath.Join(dir, "bundles", "c1")
			if err := os.MkdirAll(filepath.Join(b, "rootfs"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.b.runtime != "" {
				if err := runc.WriteRuntime(b, tc.b.runtime); err != nil {
					t.Fatal(err)
				}
			}
			switch {
			case tc.b.options != "":
				if err := os.WriteFile(filepath.Join(b, "options.json"), []byte(tc.b.options), 0o600); err != nil {
					t.Fatal(err)
				}
			case tc.b.root:
				if err := runc.WriteOptions(b, &options.Options{Root: runcRoot}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.b.stateDir {
				if err := os.MkdirAll(filepath.Join(runcRoot, ns, id), 0o711); err != nil {
					t.Fatal(err)
				}
			}
			if tc.b.exit != "" {
				if err := os.WriteFile(filepath.Join(b, "exit.json"), []byte(tc.b.exit), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			switch tc.b.namespace {
			case "":
				ctx = namespaces.WithNamespace(ctx, ns)
			case "-":
			default:
				ctx = namespaces.WithNamespace(ctx, tc.b.namespace)
			}
			st, done := deletedStop(ctx, b, id)
			if done != tc.want {
				t.Fatalf("answered without runc: %v, want %v", done, tc.want)
			}
			if done && (st.Pid != 42 || st.ExitStatus != 143 || !st.ExitedAt.Equal(exitedAt)) {
				t.Fatalf("status %+v, want the recorded exit (pid 42, status 143, %v)", st, exitedAt)
			}
		})
	}
}
