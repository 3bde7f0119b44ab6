package shim

import (
	"encoding/json"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

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
		{name: "SELinux container type with categories", edit: func(s *specs.Spec) {
			s.Process.SelinuxLabel = "system_u:system_r:container_t:s0:c4,c9"
			s.Linux.MountLabel = "system_u:object_r:container_file_t:s0:c4,c9"
		}},
		{name: "SELinux spc_t is unconfined", edit: func(s *specs.Spec) { s.Process.SelinuxLabel = "system_u:system_r:spc_t:s0" },
			want: "SELinux type spc_t"},
		{name: "SELinux label without a type", edit: func(s *specs.Spec) { s.Process.SelinuxLabel = "container_t" },
			want: "not a context"},
		{name: "mount label smuggling options", edit: func(s *specs.Spec) {
			s.Linux.MountLabel = `system_u:object_r:container_file_t:s0",lowerdir=/`
		}, want: "linux.mountLabel"},
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
		{name: "createRuntime hook", edit: func(s *specs.Spec) {
			s.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/usr/bin/nvidia-ctk"}}}
		}, want: "createRuntime hooks"},
		{name: "poststop hook", edit: func(s *specs.Spec) { s.Hooks = &specs.Hooks{Poststop: []specs.Hook{{Path: "/x"}}} }, want: "poststop"},
		{name: "empty hooks section", edit: func(s *specs.Spec) { s.Hooks = &specs.Hooks{} }},
		{name: "Localhost profile allowing unshare", edit: func(s *specs.Spec) { s.Linux.Seccomp = profile(allow("read", "unshare")) }, want: "lets unshare"},
		{name: "Localhost profile allowing clone3", edit: func(s *specs.Spec) { s.Linux.Seccomp = profile(allow("clone3")) }, want: "lets clone3"},
		{name: "Localhost profile logging mount", edit: func(s *specs.Spec) {
			s.Linux.Seccomp = profile(specs.LinuxSyscall{Names: []string{"mount"}, Action: specs.ActLog})
		}, want: "lets mount"},
		{name: "Localhost profile refusing setns", edit: func(s *specs.Spec) {
			s.Linux.Seccomp = profile(specs.LinuxSyscall{Names: []string{"setns"}, Action: specs.ActErrno})
		}},
		{name: "RuntimeDefault for CAP_SYS_ADMIN is narrowed, not refused", edit: func(s *specs.Spec) {
			s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN", "CAP_CHOWN"}}
			s.Linux.Seccomp = seccomp.DefaultProfile(s)
		}},
		{name: "RuntimeDefault of another containerd opening unshare", edit: func(s *specs.Spec) {
			s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}}
			s.Linux.Seccomp = seccomp.DefaultProfile(s)
			s.Linux.Seccomp.Syscalls = s.Linux.Seccomp.Syscalls[1:]
		}, want: "use seccompProfile RuntimeDefault"},
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

func allow(names ...string) specs.LinuxSyscall {
	return specs.LinuxSyscall{Names: names, Action: specs.ActAllow}
}

func profile(rules ...specs.LinuxSyscall) *specs.LinuxSeccomp {
	return &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: rules}
}

func TestGatedSyscall(t *testing.T) {
	// containerd's own rule for processes without CAP_SYS_ADMIN: no namespace flag at all.
	newNamespaceFlags := uint64(unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
		unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP)
	withoutNewUser := []specs.LinuxSeccompArg{{Index: 0, Value: newNamespaceFlags, Op: specs.OpMaskedEqual}}
	cases := []struct {
		name string
		sc   *specs.LinuxSeccomp
		want string
	}{
		{"no filter", nil, ""},
		{"ordinary calls", profile(allow("read", "write", "openat")), ""},
		{"unshare", profile(allow("read"), allow("unshare")), "unshare"},
		{"setns among others", profile(allow("read", "setns")), "setns"},
		{"bpf", profile(allow("bpf")), "bpf"},
		{"perf_event_open", profile(allow("perf_event_open")), "perf_event_open"},
		{"syslog", profile(allow("syslog")), "syslog"},
		{"new mount API", profile(allow("fsopen")), "fsopen"},
		{"clone without conditions", profile(allow("clone")), "clone"},
		{"clone without namespace flags", profile(specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow, Args: withoutNewUser}), ""},
		{"clone masked without CLONE_NEWUSER in the mask", profile(specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: unix.CLONE_NEWNS, Op: specs.OpMaskedEqual}}}), "clone"},
		{"clone matching CLONE_NEWUSER set", profile(specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: unix.CLONE_NEWUSER, ValueTwo: unix.CLONE_NEWUSER, Op: specs.OpMaskedEqual}}}), "clone"},
		{"clone compared for equality", profile(specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: 0x11, Op: specs.OpEqualTo}}}), "clone"},
		{"unshare without CLONE_NEWUSER", profile(specs.LinuxSyscall{Names: []string{"unshare"}, Action: specs.ActAllow, Args: withoutNewUser}), ""},
		{"clone3 with any condition", profile(specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActAllow, Args: withoutNewUser}), "clone3"},
		{"clone3 refused with ENOSYS", profile(specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno}), ""},
		{"mount logged", profile(specs.LinuxSyscall{Names: []string{"mount"}, Action: specs.ActLog}), "mount"},
		{"mount to a user-space agent", profile(specs.LinuxSyscall{Names: []string{"mount"}, Action: specs.ActNotify}), "mount"},
		// A process may trace its own child: a traced call runs when the container wants.
		{"mount traced", profile(specs.LinuxSyscall{Names: []string{"mount"}, Action: specs.ActTrace}), "mount"},
		{"mount trapped", profile(specs.LinuxSyscall{Names: []string{"mount"}, Action: specs.ActTrap}), ""},
		{"mount under an unknown action", profile(specs.LinuxSyscall{Names: []string{"mount"}, Action: "SCMP_ACT_SOMEDAY"}), "mount"},
		// unshare has one argument: a condition on the second is on a register the caller sets.
		{"unshare judged by an argument it does not have", profile(specs.LinuxSyscall{Names: []string{"unshare"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 1, Value: newNamespaceFlags, Op: specs.OpMaskedEqual}}}), "unshare"},
		{"clone judged by its stack argument", profile(specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 1, Value: newNamespaceFlags, Op: specs.OpMaskedEqual}}}), "clone"},
		{"mount killed", profile(specs.LinuxSyscall{Names: []string{"mount"}, Action: specs.ActKillProcess}), ""},
		{"containerd's profile for no capabilities", noCapsProfile(), ""},
		{"containerd's profile for CAP_SYS_ADMIN", seccomp.DefaultProfile(&specs.Spec{Process: &specs.Process{
			Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}}}}), "bpf"},
		{"containerd's profile for CAP_SYSLOG", seccomp.DefaultProfile(&specs.Spec{Process: &specs.Process{
			Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_SYSLOG"}}}}), "syslog"},
		{"containerd's profile for the CRI's default capabilities", seccomp.DefaultProfile(&specs.Spec{Process: &specs.Process{
			Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
				"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}}}}), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := gatedSyscall(tc.sc); got != tc.want {
				t.Errorf("gatedSyscall = %q, want %q", got, tc.want)
			}
		})
	}
}

// containerd's RuntimeDefault for a pod that asked for CAP_SYS_ADMIN opens unshare, mount,
// setns and bpf; the shim narrows it to the profile for no capabilities.
func TestNeutralizeNarrowsRuntimeDefault(t *testing.T) {
	s := criSpec()
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}, Effective: []string{"CAP_SYS_ADMIN"}}
	s.Linux.Seccomp = seccomp.DefaultProfile(s)
	if err := checkSpec(s, hostFacts{}, ""); err != nil {
		t.Fatal(err)
	}
	neutralizeSpec(s)
	if got := gatedSyscall(s.Linux.Seccomp); got != "" {
		t.Fatalf("after neutralization the filter still lets %s run", got)
	}
	want, _ := json.Marshal(noCapsProfile())
	have, _ := json.Marshal(s.Linux.Seccomp)
	if string(want) != string(have) {
		t.Errorf("filter is not containerd's profile for no capabilities")
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
	f.Add([]byte(`{"process":{"user":{"uid":1,"gid":1}},"root":{"path":"r"},"linux":{"namespaces":[{"type":"pid"},{"type":"network"},{"type":"ipc"},{"type":"uts"},{"type":"mount"}],"seccomp":{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":2114060288,"op":"SCMP_CMP_MASKED_EQ"}]}]}}}`))
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
		if permissiveSeccomp(s.Linux.Seccomp) || gatedSyscall(s.Linux.Seccomp) != "" || !slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") {
			t.Fatalf("seccomp %+v or masked paths %v open", s.Linux.Seccomp, s.Linux.MaskedPaths)
		}
		if slices.Contains(append([]uint32{s.Process.User.GID}, s.Process.User.AdditionalGids...), 6) {
			t.Fatalf("device group accepted")
		}
	})
}

func TestKeepMountLabel(t *testing.T) {
	for _, tc := range []struct {
		name, label string
		opts, want  []string
	}{
		{"no label", "", []string{"lowerdir=/a:/b"}, []string{"lowerdir=/a:/b"}},
		{"containerd's context kept", "u:r:container_file_t:s0:c1,c2",
			[]string{"lowerdir=/a", `context="u:r:container_file_t:s0:c1,c2"`}, []string{"lowerdir=/a", `context="u:r:container_file_t:s0:c1,c2"`}},
		{"added when missing", "u:r:container_file_t:s0:c1,c2",
			[]string{"lowerdir=/a"}, []string{"lowerdir=/a", `context="u:r:container_file_t:s0:c1,c2"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &types.Mount{Type: "overlay", Options: slices.Clone(tc.opts)}
			keepMountLabel(m, tc.label)
			if !slices.Equal(m.Options, tc.want) {
				t.Fatalf("options %q, want %q", m.Options, tc.want)
			}
		})
	}
}

// A label the shim accepts can only become one mount option: nothing in it can end the
// quoted value. An accepted process label always names one of the container types.
func FuzzSELinuxLabels(f *testing.F) {
	for _, s := range []string{"system_u:system_r:container_t:s0:c1,c2", `u:r:t:s0",lowerdir=/`, "spc_t", "a:b:spc_t:s0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, label string) {
		if mountLabelRefusal(label) == "" && label != "" {
			m := &types.Mount{Type: "overlay"}
			keepMountLabel(m, label)
			if len(m.Options) != 1 || strings.Count(m.Options[0], `"`) != 2 || strings.ContainsAny(label, "\"\\ ") {
				t.Fatalf("accepted mount label %q gives options %q", label, m.Options)
			}
		}
		if label != "" && processLabelRefusal(label) == "" {
			typ, ok := labelType(label)
			if !ok || !slices.Contains(confinedTypes, typ) {
				t.Fatalf("accepted process label %q has type %q", label, typ)
			}
		}
	})
}

// containerd's RuntimeDefault lists the 32-bit ABIs beside the native one; Brewlet's filter
// keeps only the native ABI whatever capabilities the pod asked for, while a pod author's
// own profile (Localhost) that opens nothing gated is left exactly as written.
func TestNeutralizeKeepsOnlyTheNativeABI(t *testing.T) {
	native, ok := nativeArch[goruntime.GOARCH]
	if !ok {
		t.Fatalf("no native seccomp architecture for %s", goruntime.GOARCH)
	}
	localhost := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno,
		Architectures: []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchAARCH64, specs.ArchARM},
		Syscalls:      []specs.LinuxSyscall{{Names: []string{"read", "write"}, Action: specs.ActAllow}}}
	for _, tc := range []struct {
		name  string
		caps  []string
		sc    func(*specs.Spec) *specs.LinuxSeccomp
		archs []specs.Arch
	}{
		{"RuntimeDefault, no capabilities", nil, seccomp.DefaultProfile, []specs.Arch{native}},
		{"RuntimeDefault, CAP_NET_BIND_SERVICE", []string{"CAP_NET_BIND_SERVICE"}, seccomp.DefaultProfile, []specs.Arch{native}},
		{"RuntimeDefault, CAP_SYS_PTRACE (opens non-gated calls)", []string{"CAP_SYS_PTRACE"}, seccomp.DefaultProfile, []specs.Arch{native}},
		{"RuntimeDefault, CAP_SYS_ADMIN", []string{"CAP_SYS_ADMIN"}, seccomp.DefaultProfile, []specs.Arch{native}},
		{"Unconfined", nil, func(*specs.Spec) *specs.LinuxSeccomp { return nil }, []specs.Arch{native}},
		{"Localhost without gated calls", nil, func(*specs.Spec) *specs.LinuxSeccomp { return localhost }, localhost.Architectures},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := criSpec()
			s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: tc.caps, Effective: tc.caps, Permitted: tc.caps}
			s.Linux.Seccomp = tc.sc(s)
			if err := checkSpec(s, hostFacts{}, ""); err != nil {
				t.Fatal(err)
			}
			neutralizeSpec(s)
			if got := s.Linux.Seccomp.Architectures; !slices.Equal(got, tc.archs) {
				t.Errorf("architectures %v, want %v", got, tc.archs)
			}
			if tc.archs[0] == native && len(tc.archs) == 1 {
				want, _ := json.Marshal(noCapsProfile())
				have, _ := json.Marshal(s.Linux.Seccomp)
				if string(want) != string(have) {
					t.Errorf("filter is not the profile for no capabilities on the native ABI")
				}
			}
		})
	}
}
