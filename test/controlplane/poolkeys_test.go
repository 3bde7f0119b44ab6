package controlplane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// A pool key is what decides which nodes receive an agent and Brewlet pods, so it must be
// a label no node can set on itself. The CRD refuses any other; a profile stored before the
// rule (an upgrade) keeps being accepted for unrelated edits (the API server's validation
// ratcheting), is moved to a node-restriction key in place, and until then serves no node
// (PoolKeyForgeable from brewlet-operator).
func TestPoolKeysNoNodeCanSet(t *testing.T) {
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	ctx, c := context.Background(), cp.Client
	profile := func(name, key string) *brewletv1.NodeProfile {
		return &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: brewletv1.NodeProfileSpec{
			NodePool: brewletv1.NodePool{Key: key, Names: []string{"general"}}, RuntimeImages: []brewletv1.OfferedRuntime{{ID: "python-3.12"}}}}
	}
	const refused = "nodePool.key must be a label key under node-restriction.kubernetes.io/"
	for i, key := range []string{"pool.example/name", "pool", "node.kubernetes.io/instance-type", "node-restriction.kubernetes.io/",
		vocab.LabelRuntime, vocab.RuntimeLabel("python-3.12"), vocab.LabelHostChanges, "node-restriction.kubernetes.io/brewlet-pool",
		// Not a label key at all: pod admission would write it into every pod of the runtime.
		"node-restriction.kubernetes.io/a/b", "node-restriction.kubernetes.io/" + strings.Repeat("p", 64)} {
		kit.ExpectDenied(t, c.Create(ctx, profile(fmt.Sprintf("forgeable-%d", i), key)), refused)
	}
	badName := profile("bad-name", offersPoolKey)
	badName.Spec.NodePool.Names = []string{"general", "not a label value"}
	kit.ExpectDenied(t, c.Create(ctx, badName), "spec.nodePool.names[1]")
	kit.Must(t, c.Create(ctx, profile("restricted", offersPoolKey)))

	// An older release's CRD had no rule: a profile stored then keeps its key.
	setPoolKeyRule(t, c, false)
	legacy := profile("legacy", "pool.example/name")
	kit.Eventually(t, 30*time.Second, "a forgeable key accepted by the older CRD", func() (bool, string) {
		err := c.Create(ctx, legacy)
		return err == nil, fmt.Sprint(err)
	})
	setPoolKeyRule(t, c, true)
	kit.Eventually(t, 30*time.Second, "the rule back", func() (bool, string) {
		err := c.Create(ctx, profile("late", "pool.example/name"), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), refused), fmt.Sprint(err)
	})

	kit.StartOperator(t, cp, false)
	kit.Eventually(t, 30*time.Second, "the stored forgeable key refused by brewlet-operator", func() (bool, string) {
		p := &brewletv1.NodeProfile{}
		kit.Must(t, c.Get(ctx, client.ObjectKeyFromObject(legacy), p))
		r := readyCond(p)
		return strings.HasPrefix(r, "False/"+string(vocab.ReasonPoolKeyForgeable)) && strings.Contains(r, "serves no node"), r
	})
	expectEvent(t, c, "legacy", vocab.ReasonPoolKeyForgeable, "Warning")

	// Unrelated edits of the stored profile are accepted (ratcheting); the key moves in place.
	edit := func(change func(p *brewletv1.NodeProfile)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error { // the operator writes it too
			if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); err != nil {
				return err
			}
			change(legacy)
			return c.Update(ctx, legacy)
		})
	}
	kit.Must(t, edit(func(p *brewletv1.NodeProfile) {
		p.Spec.RuntimeImages = append(p.Spec.RuntimeImages, brewletv1.OfferedRuntime{ID: "node-20"})
	}))
	kit.Must(t, edit(func(p *brewletv1.NodeProfile) { p.Spec.NodePool.Key = "node-restriction.kubernetes.io/team" }))
	kit.Eventually(t, 30*time.Second, "the migrated profile served", func() (bool, string) {
		p := &brewletv1.NodeProfile{}
		kit.Must(t, c.Get(ctx, client.ObjectKeyFromObject(legacy), p))
		r := readyCond(p)
		// Served: judged on its runtimes now (none exist here), no longer on its key.
		return strings.HasPrefix(r, "False/"+string(vocab.ReasonUnknownRuntimeImage)), r
	})
}

// setPoolKeyRule removes (on false) or restores the NodeProfile CRD's rule on
// spec.nodePool.key, as an older and this release's CRDs differ.
func setPoolKeyRule(t *testing.T, c client.Client, on bool) {
	t.Helper()
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	kit.Must(t, c.Get(ctx, client.ObjectKey{Name: "nodeprofiles." + brewletv1.GroupVersion.Group}, crd))
	for i := range crd.Spec.Versions {
		key := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"].Properties["nodePool"].Properties["key"]
		if on {
			key.XValidations = poolKeyRule
		} else {
			poolKeyRule, key.XValidations = key.XValidations, nil
		}
		crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"].Properties["nodePool"].Properties["key"] = key
	}
	kit.Must(t, c.Update(ctx, crd))
}

// poolKeyRule is the rule setPoolKeyRule took away.
var poolKeyRule apiextensionsv1.ValidationRules
