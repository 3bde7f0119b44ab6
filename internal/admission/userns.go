package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// UserNamespaces is the cluster's policy for Brewlet pods' user namespaces (the chart's
// admission.userNamespaces, the operator's --user-namespaces; docs/security.md "User
// namespaces").
type UserNamespaces string

const (
	// UserNamespacesPodDecides leaves hostUsers as each pod sets it (the default).
	UserNamespacesPodDecides UserNamespaces = ""
	// UserNamespacesDefault gives every Brewlet pod that does not set hostUsers a user
	// namespace of its own (hostUsers: false); a pod may still say hostUsers: true.
	UserNamespacesDefault UserNamespaces = "Default"
	// UserNamespacesRequired does the same and refuses a pod that says hostUsers: true.
	UserNamespacesRequired UserNamespaces = "Required"
)

// ParseUserNamespaces reads the flag's value.
func ParseUserNamespaces(s string) (UserNamespaces, error) {
	switch p := UserNamespaces(s); p {
	case UserNamespacesPodDecides, UserNamespacesDefault, UserNamespacesRequired:
		return p, nil
	}
	return "", fmt.Errorf("user namespace policy %q: want \"\" (the pod decides), %q or %q", s, UserNamespacesDefault, UserNamespacesRequired)
}

// applyUserNamespaces applies the policy to an admitted pod: it returns the pod to admit (a
// copy when it changes) or a denial. Idempotent: an admitted pod passes unchanged.
func applyUserNamespaces(p UserNamespaces, pod *corev1.Pod) (*corev1.Pod, string) {
	if p == UserNamespacesPodDecides {
		return pod, ""
	}
	if h := pod.Spec.HostUsers; h != nil {
		if *h && p == UserNamespacesRequired {
			return nil, fmt.Sprintf("%s: pod %s/%s shares the node's user namespace (hostUsers: true), and this cluster runs every Brewlet pod in a user namespace of its own: remove hostUsers or set it to false",
				vocab.ReasonPrivilegeNotSupported, pod.Namespace, podName(pod))
		}
		return pod, ""
	}
	out := pod.DeepCopy()
	no := false
	out.Spec.HostUsers = &no
	return out, ""
}

// podName names a pod for a message: its name, or its generateName pattern before the API
// server named it.
func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName + "*"
}
