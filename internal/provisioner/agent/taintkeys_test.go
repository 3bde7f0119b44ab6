package agent

import (
	"testing"

	"brewlet.sh/brewlet/internal/vocab"
)

func TestValidStartupTaint(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{vocab.TaintRuntimeNotReady, true},
		{"example.com/brewlet-startup", true},
		{"brewlet-startup", true},
		{"startup-taint.cluster-autoscaler.kubernetes.io/brewlet", true},
		{"node.kubernetes.io/not-ready", false},
		{"node.kubernetes.io/unreachable", false},
		{"node-role.kubernetes.io/control-plane", false},
		{"kubernetes.io/anything", false},
		{"node.cloudprovider.kubernetes.io/uninitialized", false},
		{"ignore-taint.cluster-autoscaler.kubernetes.io/x", false},
		{"karpenter.k8s.io/x", false},
		{"k8s.io/x", false},
		{"", false},
		{"bad key", false},
		{"a/b/c", false},
	} {
		err := ValidStartupTaint(tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("ValidStartupTaint(%q) = %v, want ok=%v", tc.key, err, tc.ok)
		}
		if err != nil && vocab.ReasonOf(err) != vocab.ReasonInvalidStartupTaint {
			t.Errorf("ValidStartupTaint(%q): reason %q", tc.key, vocab.ReasonOf(err))
		}
	}
}
