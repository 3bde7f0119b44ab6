package shim

import (
	"testing"

	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"

	"brewlet.sh/brewlet/internal/hoststate"
)

func mustAny(t *testing.T, v any) *anypb.Any {
	t.Helper()
	a, err := typeurl.MarshalAnyToProto(v)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRunCOptions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       func(t *testing.T) *anypb.Any
		file     string // the agent's copy of the runc handler's options
		wantRoot string
		wantBin  string
		wantErr  bool
		wantIO   uint32
	}{
		{name: "none from ctr, no file: runc's defaults", in: func(*testing.T) *anypb.Any { return nil }},
		{name: "none from CRI: the agent's file", in: func(*testing.T) *anypb.Any { return nil },
			file: "BinaryName = \"/x/runc\"\nRoot = \"/run/x\"\nSystemdCgroup = true\n", wantRoot: "/run/x", wantBin: "/x/runc"},
		{name: "a user-namespaced container: the file plus containerd's I/O owner", in: func(t *testing.T) *anypb.Any {
			return mustAny(t, &options.Options{IoUid: 65536, IoGid: 65536, Root: "/elsewhere", BinaryName: "/usr/bin/crun"})
		}, file: "BinaryName = \"/x/runc\"\nRoot = \"/run/x\"\n", wantRoot: "/run/x", wantBin: "/x/runc", wantIO: 65536},
		{name: "a wrapper in the file refused", in: func(*testing.T) *anypb.Any { return nil },
			file: "BinaryName = \"/usr/bin/crun\"\n", wantErr: true},
		{name: "a broken file refused", in: func(*testing.T) *anypb.Any { return nil }, file: "Root = [", wantErr: true},
		{name: "a handler with its own table: CRI runtimeoptions TOML converted, the file ignored", in: func(t *testing.T) *anypb.Any {
			return mustAny(t, &runtimeoptions.Options{ConfigBody: []byte("BinaryName = \"/x/runc\"\nRoot = \"/run/x\"\n")})
		}, file: "Root = \"/run/y\"\n", wantRoot: "/run/x", wantBin: "/x/runc"},
		{name: "bad TOML refused", in: func(t *testing.T) *anypb.Any {
			return mustAny(t, &runtimeoptions.Options{ConfigBody: []byte("Root = [")})
		}, wantErr: true},
		{name: "foreign type refused", in: func(t *testing.T) *anypb.Any { return mustAny(t, &emptypb.Empty{}) }, wantErr: true},
		{name: "runc by name", in: func(*testing.T) *anypb.Any { return nil }, file: "BinaryName = \"runc\"\n", wantBin: "runc"},
		{name: "a wrapper through the CRI table refused", in: func(t *testing.T) *anypb.Any {
			return mustAny(t, &runtimeoptions.Options{ConfigBody: []byte("BinaryName = \"/usr/bin/crun\"\n")})
		}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := runcOptions(tc.in(t), func() ([]byte, error) { return []byte(tc.file), nil })
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got.Root != tc.wantRoot || got.BinaryName != tc.wantBin || got.IoUid != tc.wantIO || got.IoGid != tc.wantIO {
				t.Fatalf("got root %q binary %q I/O owner %d:%d", got.Root, got.BinaryName, got.IoUid, got.IoGid)
			}
		})
	}
}

// Without a cgroup driver in the handler's options, the container's cgroup path decides; a
// handler's own table is taken as written.
func TestCgroupDriverFollowsThePath(t *testing.T) {
	l := hoststate.Under(t.TempDir())
	for _, tc := range []struct {
		name, path string
		in         *anypb.Any
		want       bool
	}{
		{name: "systemd slice path", path: "kubepods-besteffort-pod1.slice:cri-containerd:abc", want: true},
		{name: "cgroupfs path", path: "/kubepods/besteffort/pod1/abc"},
		{name: "no path", path: ""},
		{name: "a colon path that is not a slice", path: "a:b:c"},
		{name: "a handler's own table says cgroupfs", path: "kubepods.slice:cri-containerd:abc",
			in: mustAny(t, &runtimeoptions.Options{ConfigBody: []byte("SystemdCgroup = false\n")})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if err := normalizeOptions(&in, l, tc.path); err != nil {
				t.Fatal(err)
			}
			v, err := typeurl.UnmarshalAny(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := v.(*options.Options).SystemdCgroup; got != tc.want {
				t.Fatalf("SystemdCgroup %v", got)
			}
		})
	}
}
