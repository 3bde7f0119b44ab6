package shim

import (
	"testing"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/api/types/runc/options"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func TestLegacyStartRecognition(t *testing.T) {
	f, ok := parseStartFlags([]string{"-namespace", "k8s.io", "-address", "/run/c.sock", "-publish-binary", "/usr/bin/containerd", "-id", "abc", "-debug", "start"})
	if !ok || f.action != "start" || f.namespace != "k8s.io" || f.id != "abc" || f.address != "/run/c.sock" || !f.debug {
		t.Fatalf("flags: %+v %v", f, ok)
	}
	if _, ok := parseStartFlags([]string{"-unknown", "start"}); ok {
		t.Fatal("an unknown flag parsed")
	}
	if f, _ := parseStartFlags([]string{"-namespace", "k8s.io", "-id", "abc", "delete"}); f.action != "delete" {
		t.Fatalf("action %q", f.action)
	}

	newStyle, _ := proto.Marshal(&bootapi.BootstrapParams{InstanceID: "abc", Namespace: "k8s.io"})
	otherShim, _ := proto.Marshal(&bootapi.BootstrapParams{InstanceID: "other", Namespace: "k8s.io"})
	opts, _ := anypb.New(&options.Options{ShimCgroup: "/pods/x", BinaryName: "runc"})
	oldStyle, _ := proto.Marshal(opts)
	for _, tc := range []struct {
		name  string
		input []byte
		want  bool
	}{
		{"bootstrap parameters of this shim", newStyle, true},
		{"another instance's parameters", otherShim, false},
		{"runtime options (2.0–2.2)", oldStyle, false},
		{"nothing on stdin", nil, false},
		{"garbage", []byte{0xff, 0xff, 0xff}, false},
	} {
		if got := isBootstrap(tc.input, f); got != tc.want {
			t.Errorf("%s: bootstrap %v", tc.name, got)
		}
	}

	p, err := legacyParams(f, "/run/c.sock.ttrpc", oldStyle)
	if err != nil {
		t.Fatal(err)
	}
	var got options.Options
	if found, err := p.FindExtension(&got); err != nil || !found || got.ShimCgroup != "/pods/x" {
		t.Fatalf("runtime options not carried: %v %v %+v", found, err, &got)
	}
	if p.GetInstanceID() != "abc" || p.GetNamespace() != "k8s.io" || p.GetContainerdGrpcAddress() != "/run/c.sock" ||
		p.GetContainerdTtrpcAddress() != "/run/c.sock.ttrpc" || p.GetLogLevel() != bootapi.LogLevel_LOG_LEVEL_DEBUG || p.SocketDir != nil {
		t.Fatalf("params: %v", p)
	}
	if _, err := legacyParams(f, "", []byte{0xff, 0xff}); err == nil {
		t.Fatal("broken runtime options accepted")
	}
}

// A start's stdin comes from the daemon; whatever it holds, recognition and conversion end
// with a decision or an error.
func FuzzLegacyStartInput(f *testing.F) {
	opts, _ := anypb.New(&options.Options{BinaryName: "runc"})
	old, _ := proto.Marshal(opts)
	f.Add(old)
	nw, _ := proto.Marshal(&bootapi.BootstrapParams{InstanceID: "abc", Namespace: "k8s.io"})
	f.Add(nw)
	flags := startFlags{namespace: "k8s.io", id: "abc", action: "start"}
	f.Fuzz(func(t *testing.T, b []byte) {
		if isBootstrap(b, flags) {
			return
		}
		if p, err := legacyParams(flags, "", b); err == nil && p.GetInstanceID() != "abc" {
			t.Fatalf("instance %q", p.GetInstanceID())
		}
	})
}
