package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"brewlet.sh/brewlet/internal/vocab"
)

func TestUserNamespacePolicy(t *testing.T) {
	unset, no, yes := (*bool)(nil), ptr.To(false), ptr.To(true)
	for _, tc := range []struct {
		policy UserNamespaces
		pod    *bool
		want   *bool
		denied bool
	}{
		{UserNamespacesPodDecides, unset, unset, false},
		{UserNamespacesPodDecides, yes, yes, false},
		{UserNamespacesDefault, unset, no, false},
		{UserNamespacesDefault, yes, yes, false},
		{UserNamespacesDefault, no, no, false},
		{UserNamespacesRequired, unset, no, false},
		{UserNamespacesRequired, no, no, false},
		{UserNamespacesRequired, yes, nil, true},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", GenerateName: "web-"}, Spec: corev1.PodSpec{HostUsers: tc.pod}}
		got, denial := applyUserNamespaces(tc.policy, pod)
		name := string(tc.policy) + "/" + fmtBool(tc.pod)
		if tc.denied {
			if denial == "" || !strings.HasPrefix(denial, string(vocab.ReasonPrivilegeNotSupported)+": ") || !strings.Contains(denial, "ns/web-*") {
				t.Errorf("%s: denial %q", name, denial)
			}
			continue
		}
		if denial != "" || fmtBool(got.Spec.HostUsers) != fmtBool(tc.want) {
			t.Errorf("%s: hostUsers %s, denial %q", name, fmtBool(got.Spec.HostUsers), denial)
		}
		if fmtBool(pod.Spec.HostUsers) != fmtBool(tc.pod) {
			t.Errorf("%s: the input pod changed", name)
		}
		// Idempotent: admitting the admitted pod changes nothing.
		if again, d := applyUserNamespaces(tc.policy, got); d != "" || fmtBool(again.Spec.HostUsers) != fmtBool(got.Spec.HostUsers) {
			t.Errorf("%s: not idempotent", name)
		}
	}
	for _, v := range []string{"", "Default", "Required"} {
		if _, err := ParseUserNamespaces(v); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseUserNamespaces("default"); err == nil {
		t.Error("a misspelt policy accepted")
	}
}

func fmtBool(b *bool) string {
	if b == nil {
		return "unset"
	}
	if *b {
		return "true"
	}
	return "false"
}
