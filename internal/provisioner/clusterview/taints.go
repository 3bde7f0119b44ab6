package clusterview

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RemoveStartupTaints removes the taints with these keys from the node, every effect, and
// returns the keys it removed. It is the one spec change an agent may make to its Node (the
// node-scope policy allows removing exactly these keys). Taints are no merge list, so the
// patch is a JSON patch that first tests the list it read: a taint another controller added
// meanwhile fails the patch (retried next pass) rather than being dropped. The full Node is
// read (its taints), so the agent calls this only until the taints are gone once: nothing
// puts them back on a registered node.
func (c Cluster) RemoveStartupTaints(ctx context.Context, keys []string) ([]string, error) {
	node := &corev1.Node{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: c.NodeName}, node); err != nil {
		return nil, fmt.Errorf("read node %s for its startup taints: %w", c.NodeName, err)
	}
	var present []string
	keep := []corev1.Taint{}
	for _, t := range node.Spec.Taints {
		if !slices.Contains(keys, t.Key) {
			keep = append(keep, t)
		} else if !slices.Contains(present, t.Key) {
			present = append(present, t.Key)
		}
	}
	if len(present) == 0 {
		return nil, nil
	}
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/spec/taints", "value": node.Spec.Taints},
		{"op": "replace", "path": "/spec/taints", "value": keep},
	})
	if err != nil {
		return nil, err
	}
	if err := c.Client.Patch(ctx, node, client.RawPatch(types.JSONPatchType, body)); err != nil {
		return nil, fmt.Errorf("remove startup taints %v from node %s: %w", present, c.NodeName, err)
	}
	return present, nil
}
