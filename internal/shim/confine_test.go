package shim

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"brewlet.sh/brewlet/internal/vocab"
)

// criSpec is the shape of an ordinary, unprivileged CRI container spec.
func criSpec() *specs.Spec {
	return &specs.Spec{
		Root:    &specs.Root{Path: "rootfs"},
		Process: &specs.Process{User: specs.User{UID: 1000, GID: 1000}},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace, Path: "/proc/42/ns/ipc"},
				{Type: specs.UTSNamespace, Path: "/proc/42/ns/uts"}, {Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: "/var/run/netns/cni-1"},
			},
			Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
			Seccomp:   &specs.LinuxSeccomp{DefaultAction: specs.ActErrno},
		},
		Annotations: map[string]string{vocab.CRISandboxName: "web-1", vocab.CRISandboxNamespace: "shop", vocab.CRIContainerName: "app"},
	}
}

func without(ns []specs.LinuxNamespace, t specs.LinuxNamespaceType) []specs.LinuxNamespace {
	return slices.DeleteFunc(slices.Clone(ns), func(n specs.LinuxNamespace) bool { return n.Type == t })
}

func TestCheckSpec(t *testing.T) {
	host := hostFacts{
		deviceGroups:  map[uint32]string{6: "/dev/vda", 44: "/dev/dri/card0"},
		hostNamespace: func(_ specs.LinuxNamespaceType, p string) bool { return strings.HasPrefix(p, "/proc/1/") },
	}
	cases := []struct {
		name       string
		edit       func(*specs.Spec)
		checkpoint string
		want       string // substring of the refusal; "" = allowed
	}{
		{name: "ordinary CRI container", edit: func(*specs.Spec) {}},
		{name: "unprivileged groups", edit: func(s *specs.Spec) { s.Process.User.AdditionalGids = []uint32{2000, 3000} }},
		{name: "user namespace is allowed", edit: func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		}},
		{name: "privileged host devices", edit: func(s *specs.Spec) {
			s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/sda", Type: "b", Major: 8}}
		}, want: "host device /dev/sda"},
		{name: "hostPID", edit: func(s *specs.Spec) { s.Linux.Namespaces = without(s.Linux.Namespaces, specs.PIDNamespace) }, want: "hostPID"},
		{name: "hostNetwork", edit: func(s *specs.Spec) { s.Linux.Namespaces = without(s.Linux.Namespaces, specs.NetworkNamespace) }, want: "hostNetwork"},
		{name: "hostIPC", edit: func(s *specs.Spec) { s.Linux.Namespaces = without(s.Linux.Namespaces, specs.IPCNamespace) }, want: "hostIPC"},
		{name: "host UTS", edit: func(s *specs.Spec) { s.Linux.Namespaces = without(s.Linux.Namespaces, specs.UTSNamespace) }, want: "uts namespace"},
		{name: "host mount namespace", edit: func(s *specs.Spec) { s.Linux.Namespaces = without(s.Linux.Namespaces, specs.MountNamespace) }, want: "mount namespace"},
		{name: "network namespace path is the node's", edit: func(s *specs.Spec) {
			s.Linux.Namespaces = append(without(s.Linux.Namespaces, specs.NetworkNamespace), specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "/proc/1/ns/net"})
		}, want: "is the node's own"},
		{name: "disk group as supplementary", edit: func(s *specs.Spec) { s.Process.User.AdditionalGids = []uint32{2000, 6} }, want: "group 6 owns the node's device /dev/vda"},
		{name: "video group as primary", edit: func(s *specs.Spec) { s.Process.User.GID = 44 }, want: "group 44"},
		{name: "checkpoint restore", edit: func(*specs.Spec) {}, checkpoint: "/var/lib/checkpoints/x", want: "checkpoint"},
		{name: "host interface moved in", edit: func(s *specs.Spec) { s.Linux.NetDevices = map[string]specs.LinuxNetDevice{"eth0": {}} }, want: "netDevices"},
		{name: "real-time scheduler", edit: func(s *specs.Spec) { s.Process.Scheduler = &specs.Scheduler{Policy: specs.SchedFIFO} }, want: "SCHED_FIFO"},
		{name: "batch scheduler is fine", edit: func(s *specs.Spec) { s.Process.Scheduler = &specs.Scheduler{Policy: specs.SchedBatch} }},
		{name: "real-time I/O", edit: func(s *specs.Spec) { s.Process.IOPriority = &specs.LinuxIOPriority{Class: specs.IOPRIO_CLASS_RT} }, want: "I/O priority"},
		{name: "no linux section", edit: func(s *specs.Spec) { s.Linux = nil }, want: "no process, linux or root"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := criSpec()
			tc.edit(s)
			err := checkSpec(s, host, tc.checkpoint)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || vocab.ReasonOf(err) != vocab.ReasonPrivilegeNotSupported || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want PrivilegeNotSupported mentioning %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), `container "app" of pod shop/web-1`) && s.Linux != nil {
				t.Errorf("refusal does not say which container: %v", err)
			}
		})
	}
}

func TestNeutralizeSpec(t *testing.T) {
	// What containerd makes of a privileged pod, minus the host devices checkSpec refuses,
	// and a procMount: Unmasked pod: everything open that can be closed without the workload
	// noticing.
	s := criSpec()
	s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
	s.Linux.MaskedPaths = nil
	s.Linux.ReadonlyPaths = []string{"/proc/sys"}
	s.Linux.Seccomp = nil
	s.Mounts[1].Options = []string{"nosuid", "rw"}
	s.Mounts[2].Options = []string{"nosuid"}
	neutralizeSpec(s)

	if d := s.Linux.Resources.Devices; len(d) != 1 || d[0].Allow || d[0].Access != "rwm" {
		t.Errorf("device rules = %+v, want deny-all", d)
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/sys/firmware"} {
		if !slices.Contains(s.Linux.MaskedPaths, p) {
			t.Errorf("masked paths miss %s", p)
		}
	}
	if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sysrq-trigger") || slices.Index(s.Linux.ReadonlyPaths, "/proc/sys") != 0 {
		t.Errorf("readonly paths = %v", s.Linux.ReadonlyPaths)
	}
	for _, m := range s.Mounts[1:] {
		if !slices.Contains(m.Options, "ro") || slices.Contains(m.Options, "rw") {
			t.Errorf("%s options = %v, want read-only", m.Destination, m.Options)
		}
	}
	if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction == specs.ActAllow {
		t.Fatalf("seccomp = %+v, want containerd's default profile", s.Linux.Seccomp)
	}
	// Without CAP_SYS_ADMIN the default profile must not allow unshare (new user namespaces).
	for _, sc := range s.Linux.Seccomp.Syscalls {
		if slices.Contains(sc.Names, "unshare") && sc.Action == specs.ActAllow {
			t.Errorf("default profile allows unshare: %+v", sc)
		}
	}
}

func TestPermissiveSeccomp(t *testing.T) {
	cases := []struct {
		sc   *specs.LinuxSeccomp
		want bool
	}{
		{nil, true},
		{&specs.LinuxSeccomp{DefaultAction: specs.ActAllow}, true},
		{&specs.LinuxSeccomp{DefaultAction: specs.ActLog}, true},
		{&specs.LinuxSeccomp{DefaultAction: specs.ActNotify}, true},
		{&specs.LinuxSeccomp{DefaultAction: specs.ActErrno}, false},
		{&specs.LinuxSeccomp{DefaultAction: specs.ActKillProcess}, false},
	}
	for _, tc := range cases {
		if got := permissiveSeccomp(tc.sc); got != tc.want {
			t.Errorf("permissiveSeccomp(%+v) = %v, want %v", tc.sc, got, tc.want)
		}
	}
}

// A seccomp filter that the pod kept is not replaced: the neutralization is for filters
// that confine nothing.
func TestNeutralizeKeepsConfiningSeccomp(t *testing.T) {
	s := criSpec()
	own := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}}
	s.Linux.Seccomp = own
	neutralizeSpec(s)
	if s.Linux.Seccomp != own {
		t.Fatalf("a confining profile was replaced")
	}
}

func TestDeviceGroups(t *testing.T) {
	// The node's own /dev: every group found must really own a device with group access.
	for gid, dev := range deviceGroups("/dev") {
		if gid == 0 || !strings.HasPrefix(dev, "/dev/") {
			t.Errorf("deviceGroups: %d -> %s", gid, dev)
		}
	}
	if len(deviceGroups(t.TempDir())) != 0 {
		t.Errorf("an empty directory has device groups")
	}
}

// FuzzConfineSpec: whatever JSON reaches the shim as config.json, the rules never panic, and
// a spec they accept leaves neutralization with no host devices, a deny-all device cgroup,
// the default masked paths and a confining seccomp filter.
func FuzzConfineSpec(f *testing.F) {
	seed, _ := json.Marshal(criSpec())
	f.Add(seed)
	f.Add([]byte(`{"process":{"user":{"uid":1,"gid":1}},"root":{"path":"r"},"linux":{"namespaces":[{"type":"pid"},{"type":"network"},{"type":"ipc"},{"type":"uts"},{"type":"mount"}],"seccomp":{"defaultAction":"SCMP_ACT_LOG"}}}`))
	f.Add([]byte(`{"linux":{"devices":[{"path":"/dev/sda"}]}}`))
	host := hostFacts{deviceGroups: map[uint32]string{6: "/dev/vda"}, hostNamespace: func(specs.LinuxNamespaceType, string) bool { return false }}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s specs.Spec
		if json.Unmarshal(b, &s) != nil {
			return
		}
		if checkSpec(&s, host, "") != nil {
			return
		}
		neutralizeSpec(&s)
		if len(s.Linux.Devices) != 0 || len(s.Linux.Resources.Devices) != 1 || s.Linux.Resources.Devices[0].Allow {
			t.Fatalf("devices open after neutralization: %+v %+v", s.Linux.Devices, s.Linux.Resources.Devices)
		}
		if permissiveSeccomp(s.Linux.Seccomp) || !slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") {
			t.Fatalf("seccomp %+v or masked paths %v open", s.Linux.Seccomp, s.Linux.MaskedPaths)
		}
		if slices.Contains(append([]uint32{s.Process.User.GID}, s.Process.User.AdditionalGids...), 6) {
			t.Fatalf("device group accepted")
		}
	})
}
