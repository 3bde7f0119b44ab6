package shim

import (
	"bytes"
	goruntime "runtime"
	"sync"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	json "github.com/go-json-experiment/json/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// A Brewlet process has no capabilities, but the kernel still lets such a process create a
// user namespace, and inside it the process holds every capability over what that namespace
// owns: mounts, more namespaces, the kernel's less travelled code. Whether bpf, perf events
// and the kernel log are open to it depends on sysctls Brewlet does not control. So the
// filter a Brewlet container runs under must refuse these calls whatever capabilities the pod
// asked for: containerd's RuntimeDefault profile opens them for CAP_SYS_ADMIN (and the like),
// and a Localhost profile may open anything. docs/shim.md, "Seccomp", states the rules.

// gatedSyscalls are the calls containerd's default profile allows only to a process holding
// CAP_SYS_ADMIN, CAP_SYSLOG, CAP_BPF or CAP_PERFMON. The list is Brewlet's own, not read
// from the containerd the shim was built with, so that the judgement does not move with
// the node's containerd version.
// A set: every create looks up each name of its profile (a few hundred).
var gatedSyscalls = map[string]bool{
	"bpf": true, "clone": true, "clone3": true, "fanotify_init": true, "fsconfig": true, "fsmount": true,
	"fsopen": true, "fspick": true, "lookup_dcookie": true, "mount": true, "mount_setattr": true,
	"move_mount": true, "open_tree": true, "perf_event_open": true, "pivot_root": true, "quotactl": true,
	"quotactl_fd": true, "setdomainname": true, "sethostname": true, "setns": true, "syslog": true,
	"umount": true, "umount2": true, "unshare": true,
}

// lets reports whether a rule's action can let the call run. Only errno, trap (SIGSYS to
// the caller) and the kill actions stop it in the kernel. Allow and log run it; notify hands
// the decision to a user-space agent; trace hands it to a tracer, and a process may trace its
// own child, so a traced call runs whenever the container wants it to. An action this list
// does not know is counted as letting the call run.
func lets(a specs.LinuxSeccompAction) bool {
	switch a {
	case specs.ActErrno, specs.ActTrap, specs.ActKill, specs.ActKillThread, specs.ActKillProcess:
		return false
	}
	return true
}

// gatedSyscall names the first capability-gated call a confining profile lets run, or "".
// clone and unshare are fine when the rule only matches flag values without
// CLONE_NEWUSER (containerd's own rule for processes without CAP_SYS_ADMIN has this form).
func gatedSyscall(sc *specs.LinuxSeccomp) string {
	if sc == nil {
		return ""
	}
	for _, r := range sc.Syscalls {
		if !lets(r.Action) {
			continue
		}
		for _, name := range r.Names {
			if !gatedSyscalls[name] {
				continue
			}
			if (name == "clone" || name == "unshare") && withoutNewUser(flagsIndex(name), r.Args) {
				continue
			}
			return name
		}
	}
	return ""
}

// flagsIndex is the argument a call takes its namespace flags in on this node's ABI:
// unshare's only argument; clone's first, but its second on s390x (where the first is the
// new stack). Any other argument register is whatever the caller put there: a condition on
// it says nothing about the flags.
func flagsIndex(name string) uint {
	if name == "clone" && goruntime.GOARCH == "s390x" {
		return 1
	}
	return 0
}

// withoutNewUser reports whether a rule's argument conditions match only flags without
// CLONE_NEWUSER: a masked-equal comparison of the flags argument (index) whose mask covers
// CLONE_NEWUSER and whose value has it clear. Conditions of one rule all have to hold, so
// one such condition is enough.
func withoutNewUser(index uint, args []specs.LinuxSeccompArg) bool {
	for _, a := range args {
		if a.Op == specs.OpMaskedEqual && a.Index == index &&
			a.Value&unix.CLONE_NEWUSER != 0 && a.ValueTwo&unix.CLONE_NEWUSER == 0 {
			return true
		}
	}
	return false
}

// noCapsProfile is containerd's default profile as generated for a process without
// capabilities, for the node's own system-call ABI only: what every Brewlet process may run
// under at most.
// Built once per shim process and shared by its creates: nothing changes a spec's filter
// after it is put in place (neutralizeSpec), and the spec is only written out.
var noCapsProfile = sync.OnceValue(func() *specs.LinuxSeccomp {
	p := seccomp.DefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if a, ok := nativeArch[goruntime.GOARCH]; ok {
		p.Architectures = []specs.Arch{a}
	}
	return p
})

// nativeArch is the seccomp architecture of the shim's own build. containerd's profile also
// lists the 32-bit ABIs the kernel runs beside the native one (x86 and x32 on amd64, arm on
// arm64), and runc builds the filter once for each: on a 2-core node that was about 18 ms
// of every container start, against 2 ms for the native ABI alone (docs/benchmarks.md).
// A runtime installed by Brewlet is an image of the node's platform, so a Brewlet process
// has no business making 32-bit system calls; without their architecture in the filter the
// kernel's call from another ABI meets libseccomp's bad-architecture action and the thread
// is killed: a smaller attack surface (the compat entry points), not only a faster start.
var nativeArch = map[string]specs.Arch{
	"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64, "ppc64le": specs.ArchPPC64LE,
	"s390x": specs.ArchS390X, "riscv64": specs.ArchRISCV64,
}

// isRuntimeDefault reports whether a spec's filter is the one containerd generates for
// seccompProfile RuntimeDefault and the capabilities the spec asks for: that profile is
// containerd's, not the pod author's, so narrowing it to the no-capability profile takes
// nothing the pod chose. A containerd of another version generates a slightly different
// list; such a profile, if it opens a gated call, is refused like a Localhost one.
func isRuntimeDefault(s *specs.Spec) bool {
	if s.Linux == nil || s.Linux.Seccomp == nil || s.Process == nil {
		return false
	}
	// DefaultProfile reads only the bounding set, and dereferences it unchecked.
	caps := &specs.LinuxCapabilities{}
	if s.Process.Capabilities != nil {
		caps.Bounding = s.Process.Capabilities.Bounding
	}
	var want []byte
	if len(caps.Bounding) == 0 {
		want = noCapsDefaultJSON() // nearly every Brewlet pod: spared a profile and its JSON per create
	} else {
		var err error
		if want, err = json.Marshal(seccomp.DefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: caps}})); err != nil {
			return false
		}
	}
	have, err := json.Marshal(s.Linux.Seccomp)
	return err == nil && bytes.Equal(have, want)
}

// noCapsDefaultJSON is containerd's RuntimeDefault for no capabilities as JSON.
var noCapsDefaultJSON = sync.OnceValue(func() []byte {
	b, _ := json.Marshal(seccomp.DefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}))
	return b
})

// permissiveSeccomp reports whether a seccomp filter confines nothing by default: none at
// all (Unconfined), or a profile whose default action allows, only logs, or defers every
// unlisted system call to a user-space agent.
func permissiveSeccomp(sc *specs.LinuxSeccomp) bool {
	return sc == nil || lets(sc.DefaultAction)
}

// seccompRefusal says why a spec's confining filter is refused, or "": a filter other than
// containerd's RuntimeDefault (a Localhost profile) that lets a capability-gated call run.
// The pod's author wrote that profile, so Brewlet does not silently replace it.
func seccompRefusal(s *specs.Spec) string {
	if permissiveSeccomp(s.Linux.Seccomp) {
		return "" // replaced by neutralizeSpec: nothing confining was chosen
	}
	name := gatedSyscall(s.Linux.Seccomp)
	if name == "" || isRuntimeDefault(s) {
		return ""
	}
	return "the seccomp profile (Localhost) lets " + name + " run, which a process without capabilities can use to create a user namespace or reach kernel interfaces that need capabilities; Brewlet processes run without capabilities: use seccompProfile RuntimeDefault, or refuse " + name + " in the profile (clone and unshare may be allowed only without CLONE_NEWUSER)"
}
