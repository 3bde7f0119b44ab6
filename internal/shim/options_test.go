package shim

import (
	"testing"

	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
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
		wantRoot string
		wantBin  string
		wantErr  bool
	}{
		{"none from ctr", func(*testing.T) *anypb.Any { return nil }, "", "", false},
		{"runc options kept", func(t *testing.T) *anypb.Any {
			return mustAny(t, &options.Options{Root: "/r", BinaryName: "/b/runc"})
		}, "/r", "/b/runc", false},
		{"CRI runtimeoptions TOML converted", func(t *testing.T) *anypb.Any {
			return mustAny(t, &runtimeoptions.Options{ConfigBody: []byte("BinaryName = \"/x/runc\"\nRoot = \"/run/x\"\n")})
		}, "/run/x", "/x/runc", false},
		{"bad TOML refused", func(t *testing.T) *anypb.Any {
			return mustAny(t, &runtimeoptions.Options{ConfigBody: []byte("Root = [")})
		}, "", "", true},
		{"foreign type refused", func(t *testing.T) *anypb.Any { return mustAny(t, &emptypb.Empty{}) }, "", "", true},
		{"runc by name", func(t *testing.T) *anypb.Any { return mustAny(t, &options.Options{BinaryName: "runc"}) }, "", "runc", false},
		{"a wrapper runtime refused", func(t *testing.T) *anypb.Any {
			return mustAny(t, &options.Options{BinaryName: "/usr/local/nvidia/toolkit/nvidia-container-runtime"})
		}, "", "", true},
		{"a wrapper through the CRI table refused", func(t *testing.T) *anypb.Any {
			return mustAny(t, &runtimeoptions.Options{ConfigBody: []byte("BinaryName = \"/usr/bin/crun\"\n")})
		}, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := runcOptions(tc.in(t))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got.Root != tc.wantRoot || got.BinaryName != tc.wantBin {
				t.Fatalf("got root %q binary %q", got.Root, got.BinaryName)
			}
		})
	}
}
