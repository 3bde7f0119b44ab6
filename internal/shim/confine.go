package shim

import (
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"brewlet.sh/brewlet/internal/vocab"
)

// The whole OCI spec, not only its process, is under Brewlet's rules: admission may have
// been bypassed (a static pod, a misconfigured webhook, a direct CRI client), so the shim
// judges every field that can widen what the application can reach on the host. Each field
// is either refused (the pod asked for something Brewlet will not give; the user must change
// the pod) or neutralized (a default containerd or the pod left open is closed, and nothing a
// legitimate workload relies on changes). docs/shim.md lists the decision per field.

// requiredNamespaces are the namespaces a container must not share with the host.
var requiredNamespaces = []specs.LinuxNamespaceType{
	specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace,
}

// nsField names the pod setting that removes a namespace, for the refusal message.
var nsField = map[specs.LinuxNamespaceType]string{
	specs.PIDNamespace:     "hostPID",
	specs.NetworkNamespace: "hostNetwork",
	specs.IPCNamespace:     "hostIPC",
	specs.UTSNamespace:     "hostNetwork",
	specs.MountNamespace:   "a host mount namespace",
}

// defaultMaskedPaths and defaultReadonlyPaths are what containerd and the kubelet apply to
// an ordinary container; privileged pods and procMount: Unmasked remove them.
var defaultMaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
	"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
}

var defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// checkSpec refuses what a pod asked for and Brewlet does not give. It changes nothing.
func checkSpec(s *specs.Spec, host hostFacts, checkpoint string) error {
	who := containerName(s)
	deny := func(format string, args ...any) error {
		return vocab.Errorf(vocab.ReasonPrivilegeNotSupported, "%s: %s", who, fmt.Sprintf(format, args...))
	}
	if checkpoint != "" {
		return deny("restoring from a checkpoint is not supported: a checkpoint carries a process state Brewlet did not start, so its identity and runtime cannot be checked; start the container fresh")
	}
	if s.Process == nil || s.Linux == nil || s.Root == nil {
		return deny("the OCI spec has no process, linux or root section; this is not a container the CRI prepared")
	}
	if len(s.Linux.Devices) > 0 {
		return deny("host device %s is requested (securityContext.privileged: true, a device plugin or a CDI device); Brewlet containers get only the standard /dev entries: remove privileged and device requests, or run the workload with another RuntimeClass",
			s.Linux.Devices[0].Path)
	}
	have := map[specs.LinuxNamespaceType]specs.LinuxNamespace{}
	for _, ns := range s.Linux.Namespaces {
		have[ns.Type] = ns
	}
	for _, t := range requiredNamespaces {
		ns, ok := have[t]
		if !ok {
			return deny("the container would share the node's %s namespace (%s: true); Brewlet containers keep their own: remove %s", t, nsField[t], nsField[t])
		}
		if ns.Path != "" && host.hostNamespace != nil && host.hostNamespace(t, ns.Path) {
			return deny("the container's %s namespace %s is the node's own; Brewlet containers keep their own: remove %s", t, ns.Path, nsField[t])
		}
	}
	if len(s.Linux.NetDevices) > 0 {
		return deny("linux.netDevices moves a host network interface into the container; remove it")
	}
	if why := processPrivilege(s.Process); why != "" {
		return deny("%s", why)
	}
	if why := mountLabelRefusal(s.Linux.MountLabel); why != "" {
		return deny("%s", why)
	}
	if h := hookNames(s.Hooks); len(h) > 0 {
		return deny("the OCI spec carries %s hooks (added by a CDI device, an NRI plugin or the node's base runtime spec); hooks run on the node as root, outside the container and before Brewlet's rules apply, so Brewlet containers have none: remove the CDI device request, or keep the plugin away from runtime handler %s", strings.Join(h, ", "), vocab.RuntimeClassName)
	}
	if why := seccompRefusal(s); why != "" {
		return deny("%s", why)
	}
	u := s.Process.User
	for _, g := range append([]uint32{u.GID}, u.AdditionalGids...) {
		if dev, ok := host.deviceGroups[g]; ok {
			return deny("group %d owns the node's device %s, so a process in it could use that device; remove group %d from securityContext.runAsGroup/supplementalGroups (or the image's account files)", g, dev, g)
		}
	}
	return nil
}

// processPrivilege names what a process (a container's init or an exec session) asks for
// beyond Brewlet's rules that runc, running as root, would grant before it drops privileges.
func processPrivilege(p *specs.Process) string {
	if sc := p.Scheduler; sc != nil && slices.Contains([]specs.LinuxSchedulerPolicy{specs.SchedFIFO, specs.SchedRR, specs.SchedDeadline}, sc.Policy) {
		return fmt.Sprintf("real-time scheduling policy %s is requested; Brewlet processes use the normal scheduler", sc.Policy)
	}
	if io := p.IOPriority; io != nil && io.Class == specs.IOPRIO_CLASS_RT {
		return "real-time I/O priority is requested; Brewlet processes use the best-effort or idle I/O class"
	}
	return processLabelRefusal(p.SelinuxLabel)
}

// neutralizeSpec closes what containerd or the pod left open and the workload does not need:
// device cgroup rules beyond the standard devices, missing masked and read-only paths,
// writable sysfs and cgroupfs, and a missing, allow-everything or capability-opening seccomp
// filter (containerd's default profile for a process without capabilities, which also
// refuses new user namespaces).
func neutralizeSpec(s *specs.Spec) {
	if s.Linux.Resources == nil {
		s.Linux.Resources = &specs.LinuxResources{}
	}
	// Deny everything; runc adds its fixed list of standard devices (null, zero, full,
	// random, urandom, tty, console, ptmx, pts) after the spec's rules.
	s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
	s.Linux.MaskedPaths = union(s.Linux.MaskedPaths, defaultMaskedPaths)
	s.Linux.ReadonlyPaths = union(s.Linux.ReadonlyPaths, defaultReadonlyPaths)
	for i, m := range s.Mounts {
		if m.Type == "sysfs" || m.Type == "cgroup" || m.Type == "cgroup2" {
			s.Mounts[i].Options = readOnly(m.Options)
		}
	}
	// A filter that lets a capability-gated call run can only be containerd's RuntimeDefault
	// for capabilities the pod asked for (checkSpec refused any other): it is narrowed to
	// the profile for a process without capabilities, which Brewlet processes are, and for
	// the node's own ABI (seccomp.go, nativeArch). So is containerd's RuntimeDefault for any
	// capabilities: it is containerd's choice, not the pod author's. A Localhost profile
	// that opens nothing gated is the author's and stays as written. Called before the
	// process rules drop the capabilities, which RuntimeDefault is recognized by.
	if permissiveSeccomp(s.Linux.Seccomp) || gatedSyscall(s.Linux.Seccomp) != "" || isRuntimeDefault(s) {
		s.Linux.Seccomp = noCapsProfile()
	}
}

// hookNames lists the kinds of OCI hooks a spec asks runc to run.
func hookNames(h *specs.Hooks) []string {
	if h == nil {
		return nil
	}
	var out []string
	for _, k := range []struct {
		name  string
		hooks []specs.Hook
	}{
		{"prestart", h.Prestart}, //nolint:staticcheck // deprecated in the spec, still run by runc
		{"createRuntime", h.CreateRuntime}, {"createContainer", h.CreateContainer},
		{"startContainer", h.StartContainer}, {"poststart", h.Poststart}, {"poststop", h.Poststop},
	} {
		if len(k.hooks) > 0 {
			out = append(out, k.name)
		}
	}
	return out
}

func union(have, want []string) []string {
	out := slices.Clone(have)
	for _, p := range want {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func readOnly(opts []string) []string {
	out := make([]string, 0, len(opts)+1)
	for _, o := range opts {
		if o != "rw" && o != "ro" {
			out = append(out, o)
		}
	}
	return append(out, "ro")
}

// containerName says which container a refusal is about, from the CRI annotations.
func containerName(s *specs.Spec) string {
	a := s.Annotations
	if a[vocab.CRISandboxName] == "" {
		return "container"
	}
	return fmt.Sprintf("container %q of pod %s/%s", a[vocab.CRIContainerName], a[vocab.CRISandboxNamespace], strings.TrimSpace(a[vocab.CRISandboxName]))
}
