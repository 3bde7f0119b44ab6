package shim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/containerd/api/types"
)

// On SELinux nodes containerd gives a container two labels: the process runs in
// linux.process.selinuxLabel's domain, and the root filesystem is mounted with
// context="<linux.mountLabel>", so every file of it, whatever label its layer carries,
// appears with the container's own file context. Brewlet's composed root is containerd's
// overlay mount with more lower directories, so the runtime layers get that context too,
// exactly as the application's snapshots do (docs/shim.md, "SELinux nodes").

// confinedTypes are the SELinux process types of the node's container policy; any other
// type (spc_t above all, which is unconfined) takes the container out of it. The list is
// Pod Security baseline's.
var confinedTypes = []string{"container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

// labelType returns the type of an SELinux context user:role:type[:level].
func labelType(label string) (string, bool) {
	f := strings.SplitN(label, ":", 4)
	if len(f) < 3 || f[0] == "" || f[1] == "" || f[2] == "" {
		return "", false
	}
	return f[2], true
}

// processLabelRefusal says why a process label is not one Brewlet runs, "" when it is
// (including no label, on nodes without SELinux).
func processLabelRefusal(label string) string {
	if label == "" {
		return ""
	}
	t, ok := labelType(label)
	switch {
	case !ok:
		return fmt.Sprintf("the SELinux process label %q is not a context user:role:type:level", label)
	case !slices.Contains(confinedTypes, t):
		return fmt.Sprintf("SELinux type %s is requested (securityContext.seLinuxOptions.type); it leaves the node's container policy, so Brewlet processes run as one of %s: remove seLinuxOptions.type",
			t, strings.Join(confinedTypes, ", "))
	}
	return ""
}

// validMountLabel reports a context made only of the characters SELinux contexts use (MCS
// categories bring the comma).
func validMountLabel(label string) bool {
	if _, ok := labelType(label); !ok {
		return false
	}
	contextChar := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.:,-", r)
	}
	for _, r := range label {
		if !contextChar(r) {
			return false
		}
	}
	return true
}

// mountLabelRefusal refuses a mount label that is not an SELinux context: it becomes a
// mount option of the composed root, where a quote would end the label and start options.
func mountLabelRefusal(label string) string {
	if label == "" || validMountLabel(label) {
		return ""
	}
	return fmt.Sprintf("linux.mountLabel %q is not an SELinux context user:role:type:level; the CRI sets it from securityContext.seLinuxOptions", label)
}

// keepMountLabel makes sure the composed root is mounted in the container's file context:
// containerd adds context= to the rootfs mount whenever the spec has a mount label; a root
// handed over without it (another CRI client) gets it here, as containerd would add it.
func keepMountLabel(m *types.Mount, label string) {
	if label == "" || slices.ContainsFunc(m.Options, func(o string) bool { return strings.HasPrefix(o, "context=") }) {
		return
	}
	m.Options = append(m.Options, fmt.Sprintf("context=%q", label))
}
