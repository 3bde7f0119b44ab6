package shim

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containerd/containerd/api/types"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"

	"brewlet.sh/brewlet/internal/vocab"
)

func podMapping(host, size uint32) []specs.LinuxIDMapping {
	return []specs.LinuxIDMapping{{ContainerID: 0, HostID: host, Size: size}}
}

func usernsSpec(edit func(*specs.Spec)) *specs.Spec {
	s := &specs.Spec{Process: &specs.Process{User: specs.User{UID: 10001, GID: 10001}}, Linux: &specs.Linux{
		Namespaces:  []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.UserNamespace, Path: "/proc/42/ns/user"}},
		UIDMappings: podMapping(65536, 65536), GIDMappings: podMapping(65536, 65536)}}
	if edit != nil {
		edit(s)
	}
	return s
}

// What the shim accepts of a container's user namespace before it maps any layer.
func TestUserNamespaceOfSpec(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*specs.Spec)
		want   string // "" accepted
		userns bool
	}{
		{name: "the kubelet's hostUsers: false", userns: true},
		{name: "the node's user namespace", edit: func(s *specs.Spec) {
			s.Linux.Namespaces = s.Linux.Namespaces[:1]
			s.Linux.UIDMappings, s.Linux.GIDMappings = nil, nil
		}},
		{name: "mappings without a user namespace", edit: func(s *specs.Spec) { s.Linux.Namespaces = s.Linux.Namespaces[:1] },
			want: "no user namespace"},
		{name: "a user namespace without mappings", edit: func(s *specs.Spec) { s.Linux.UIDMappings = nil }, want: "0 ID mapping lines"},
		{name: "too many mapping lines", edit: func(s *specs.Spec) {
			for i := range 20 {
				s.Linux.GIDMappings = append(s.Linux.GIDMappings, specs.LinuxIDMapping{ContainerID: uint32(70000 + i), HostID: uint32(200000 + i), Size: 1})
			}
		}, want: "21 ID mapping lines"},
		{name: "an empty mapping", edit: func(s *specs.Spec) { s.Linux.UIDMappings = podMapping(65536, 0) }, want: "empty or runs past"},
		{name: "a mapping past the last ID", edit: func(s *specs.Spec) { s.Linux.GIDMappings = podMapping(4294967295-10, 65536) },
			want: "empty or runs past"},
		{name: "the runtime user outside the pod's IDs", edit: func(s *specs.Spec) { s.Linux.UIDMappings = podMapping(65536, 5000) },
			want: "outside the pod's user namespace", userns: true},
		{name: "a supplementary group outside the pod's IDs", edit: func(s *specs.Spec) { s.Process.User.AdditionalGids = []uint32{70000} },
			want: "outside the pod's user namespace", userns: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := usernsSpec(tc.edit)
			_, _, ok, err := usernsOf(s)
			if err == nil && ok {
				err = userInNamespace(s)
			}
			if tc.want == "" {
				if err != nil || ok != tc.userns {
					t.Fatalf("err %v, user namespace %v", err, ok)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || vocab.ReasonOf(err) != vocab.ReasonUserNamespaceUnsupported {
				t.Fatalf("got %v, want %s: …%s…", err, vocab.ReasonUserNamespaceUnsupported, tc.want)
			}
		})
	}
}

// containerd's snapshot mapping options are taken off the mount (the shim maps the layers
// itself) and must be the container's own.
func TestSnapshotMapping(t *testing.T) {
	m := podMapping(65536, 65536)
	for _, tc := range []struct {
		name    string
		opts    []string
		mapped  bool
		wantErr bool
	}{
		{name: "a snapshotter that chowned its layers", opts: []string{"index=off", "lowerdir=/a:/b"}},
		{name: "the container's mapping", opts: []string{"lowerdir=/a:/b", "uidmap=0:65536:65536", "gidmap=0:65536:65536"}, mapped: true},
		{name: "another pod's mapping", opts: []string{"lowerdir=/a:/b", "uidmap=0:131072:65536", "gidmap=0:131072:65536"}, wantErr: true},
		{name: "only a uid mapping", opts: []string{"lowerdir=/a:/b", "uidmap=0:65536:65536"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt := &types.Mount{Type: "overlay", Options: tc.opts}
			mapped, err := snapshotMapping(mnt, m, m)
			if (err != nil) != tc.wantErr || mapped != tc.mapped {
				t.Fatalf("mapped %v err %v", mapped, err)
			}
			if err != nil {
				return
			}
			for _, o := range mnt.Options {
				if strings.HasPrefix(o, "uidmap=") || strings.HasPrefix(o, "gidmap=") {
					t.Fatalf("containerd would map the common parent again: %v", mnt.Options)
				}
			}
			if lowerdirs(mnt)[1] != "/b" {
				t.Fatalf("lower directories changed: %v", mnt.Options)
			}
		})
	}
}

func TestKernelAtLeast(t *testing.T) {
	for release, want := range map[string]bool{"6.18.44-fc-v1300": true, "5.19.0": true, "5.15.0-91-generic": false, "4.18.0-553.el8": false, "x": false, "6": false} {
		if got := kernelAtLeast(release, 5, 19); got != want {
			t.Errorf("%s: %v", release, got)
		}
	}
}

// A node that cannot map the layers reports idmapped mounts off, so containerd's CRI offers
// no user namespaces on the handler and the kubelet refuses hostUsers: false pods itself.
func TestWithoutUserNamespaces(t *testing.T) {
	on := true
	f := &features.Features{Linux: &features.Linux{Namespaces: []string{"user"},
		MountExtensions: &features.MountExtensions{IDMap: &features.IDMap{Enabled: &on}}}}
	a, err := typeurl.MarshalAnyToProto(f)
	if err != nil {
		t.Fatal(err)
	}
	info := &types.RuntimeInfo{Features: a}
	if err := withoutUserNamespaces(info, "no idmapped mounts here"); err != nil {
		t.Fatal(err)
	}
	v, err := typeurl.UnmarshalAny(info.Features)
	if err != nil {
		t.Fatal(err)
	}
	got := v.(*features.Features)
	if *got.Linux.MountExtensions.IDMap.Enabled || got.Annotations[AnnotationUserNamespaces] != "no idmapped mounts here" {
		t.Fatalf("features %+v", got)
	}
	if why := usernsUnavailable(true, layout()); !strings.Contains(why, "options table") {
		t.Fatalf("a handler with its own options table: %q", why)
	}
}

// FuzzUserNamespace: whatever mappings a spec and an overlay mount carry, the checks never
// panic; an accepted one maps the process's user and groups, and the mount keeps no
// mapping option for containerd to apply again.
func FuzzUserNamespace(f *testing.F) {
	f.Add([]byte(`{"process":{"user":{"uid":10001,"gid":10001}},"linux":{"namespaces":[{"type":"user"}],"uidMappings":[{"containerID":0,"hostID":65536,"size":65536}],"gidMappings":[{"containerID":0,"hostID":65536,"size":65536}]}}`), "uidmap=0:65536:65536,gidmap=0:65536:65536")
	f.Add([]byte(`{"process":{"user":{"uid":4294967295,"gid":0}},"linux":{"namespaces":[{"type":"user"}],"uidMappings":[{"containerID":4294967295,"hostID":1,"size":1}],"gidMappings":[{"containerID":0,"hostID":0,"size":4294967295}]}}`), "")
	f.Add([]byte(`{"process":{"user":{}},"linux":{"namespaces":[{"type":"user"}],"uidMappings":[{"size":1}],"gidMappings":[{"size":1}]}}`), "uidmap=")
	f.Fuzz(func(t *testing.T, b []byte, opts string) {
		var s specs.Spec
		if json.Unmarshal(b, &s) != nil || s.Process == nil || s.Linux == nil {
			return
		}
		uid, gid, ok, err := usernsOf(&s)
		if err != nil || !ok {
			return
		}
		if userInNamespace(&s) != nil {
			return
		}
		if !mapsID(uid, s.Process.User.UID) || !mapsID(gid, s.Process.User.GID) {
			t.Fatalf("accepted an unmapped user %+v with %v %v", s.Process.User, uid, gid)
		}
		m := &types.Mount{Type: "overlay", Options: append([]string{"lowerdir=/a:/b"}, strings.Split(opts, ",")...)}
		if _, err := snapshotMapping(m, uid, gid); err != nil {
			return
		}
		for _, o := range m.Options {
			if strings.HasPrefix(o, "uidmap=") || strings.HasPrefix(o, "gidmap=") {
				t.Fatalf("mapping option kept: %v", m.Options)
			}
		}
	})
}
