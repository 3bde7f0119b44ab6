package controlplane

import (
	"context"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// chartOperatorAttacks tries, with the operator's real token on a cluster where the chart is
// installed, the writes one step beyond its job (another field of the objects it may update,
// another webhook field or configuration, another RuntimeClass) and expects each refused
// with the rule that refuses it named; the writes its job needs stay allowed. Writes are
// server-side dry runs: admission judges them fully, nothing is stored.
func chartOperatorAttacks(t *testing.T, cp *framework.ControlPlane) {
	ctx, c := context.Background(), cp.Client
	op := client.NewDryRunClient(kit.SAClient(t, cp.Config, kit.ChartNS, "brewlet-operator", nil))
	const scope = "brewlet-operator-scope"
	ri := kit.RuntimeImage("attack-target", "registry.example/runtimes/python@"+kit.GoodDigest)
	if err := c.Create(ctx, ri); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kit.Must(t, c.Get(ctx, client.ObjectKeyFromObject(ri), ri))
	kata := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata"}
	kit.Must(t, c.Create(ctx, kata))

	edit := func(mut func(*brewletv1.RuntimeImage)) error {
		var got brewletv1.RuntimeImage
		if err := op.Get(ctx, client.ObjectKeyFromObject(ri), &got); err != nil {
			return err
		}
		mut(&got)
		return op.Update(ctx, &got)
	}
	// The policy takes effect asynchronously, like RBAC.
	kit.WaitDenied(t, "the operator changing spec.source.image", scope, func() error {
		return edit(func(r *brewletv1.RuntimeImage) { r.Spec.Source.Image = "evil.example/python@" + kit.GoodDigest })
	})
	kit.ExpectDenied(t, edit(func(r *brewletv1.RuntimeImage) { r.Spec.Revoked = !r.Spec.Revoked }), "spec, labels, annotations, owner references and other finalizers belong to the administrators")
	kit.ExpectDenied(t, edit(func(r *brewletv1.RuntimeImage) { r.Labels = map[string]string{"x": "y"} }), scope)
	kit.ExpectDenied(t, edit(func(r *brewletv1.RuntimeImage) { r.Annotations = map[string]string{"x": "y"} }), scope)
	if err := edit(func(r *brewletv1.RuntimeImage) { r.Finalizers = append(r.Finalizers, vocab.FinalizerRevocation) }); err != nil {
		t.Errorf("the operator adding its finalizer: %v", err)
	}
	// What the garbage collector acts on: an owner reference to an object that does not
	// exist would have the RuntimeImage deleted (a new epoch, a full reinstall everywhere);
	// another controller's finalizer, removed, lets a deletion it holds go through.
	ghost := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "gone", UID: "00000000-0000-0000-0000-000000000000"}
	kit.ExpectDenied(t, edit(func(r *brewletv1.RuntimeImage) { r.OwnerReferences = append(r.OwnerReferences, ghost) }), "owner references")
	const foreign = "backup.example/hold"
	adminEdit := func(mut func(*brewletv1.RuntimeImage)) {
		t.Helper()
		kit.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var got brewletv1.RuntimeImage
			if err := c.Get(ctx, client.ObjectKeyFromObject(ri), &got); err != nil {
				return err
			}
			mut(&got)
			return c.Update(ctx, &got)
		}))
	}
	adminEdit(func(r *brewletv1.RuntimeImage) { r.Finalizers = append(r.Finalizers, foreign) })
	kit.ExpectDenied(t, edit(func(r *brewletv1.RuntimeImage) {
		r.Finalizers = slices.DeleteFunc(r.Finalizers, func(f string) bool { return f == foreign })
	}), "other finalizers")
	adminEdit(func(r *brewletv1.RuntimeImage) {
		r.Finalizers = slices.DeleteFunc(r.Finalizers, func(f string) bool { return f == foreign })
	})
	kit.ExpectDenied(t, edit(func(r *brewletv1.RuntimeImage) { r.Finalizers = append(r.Finalizers, "other.example/hold") }), "other finalizers")
	var np brewletv1.NodeProfileList
	kit.Must(t, c.List(ctx, &np))
	if len(np.Items) > 0 {
		p := np.Items[0].DeepCopy()
		p.Spec.NodePool.Names = append(p.Spec.NodePool.Names, "every-other-pool")
		kit.ExpectDenied(t, op.Update(ctx, p), scope)
		owned := np.Items[0].DeepCopy()
		owned.OwnerReferences = append(owned.OwnerReferences, ghost)
		kit.ExpectDenied(t, op.Update(ctx, owned), "owner references")
	}
	var nrts brewletv1.NodeRuntimeList
	kit.Must(t, c.List(ctx, &nrts))
	if len(nrts.Items) > 0 {
		n := nrts.Items[0].DeepCopy()
		n.OwnerReferences = []metav1.OwnerReference{ghost}
		kit.ExpectDenied(t, op.Update(ctx, n), "owner references or finalizers of NodeRuntime")
		n = nrts.Items[0].DeepCopy()
		n.Finalizers = append(n.Finalizers, "hold.example/forever")
		kit.ExpectDenied(t, op.Update(ctx, n), "owner references or finalizers of NodeRuntime")
	} else {
		t.Error("no NodeRuntime to attack: the chart test's nodes should have one each")
	}
	if err := op.Delete(ctx, ri); !apierrors.IsForbidden(err) {
		t.Errorf("the operator deleting a RuntimeImage: %v, want forbidden by RBAC", err)
	}

	// Its webhook configuration: the caBundle, nothing else.
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	kit.Must(t, op.Get(ctx, client.ObjectKey{Name: admission.ConfigurationName}, mwc))
	caOnly := mwc.DeepCopy()
	caOnly.Webhooks[0].ClientConfig.CABundle = []byte("-----BEGIN CERTIFICATE-----\nrotated\n-----END CERTIFICATE-----\n")
	if err := op.Update(ctx, caOnly); err != nil {
		t.Errorf("the operator writing its webhook's caBundle: %v", err)
	}
	ignore := admissionregistrationv1.Ignore
	off := mwc.DeepCopy()
	off.Webhooks[0].FailurePolicy = &ignore
	kit.ExpectDenied(t, op.Update(ctx, off), "only the caBundle")
	elsewhere := mwc.DeepCopy()
	url := "https://evil.example/mutate"
	elsewhere.Webhooks[0].ClientConfig.Service, elsewhere.Webhooks[0].ClientConfig.URL = nil, &url
	kit.ExpectDenied(t, op.Update(ctx, elsewhere), "only the caBundle")
	added := mwc.DeepCopy()
	extra := *added.Webhooks[0].DeepCopy()
	extra.Name = "everything.evil.example"
	added.Webhooks = append(added.Webhooks, extra)
	kit.ExpectDenied(t, op.Update(ctx, added), "only the caBundle")
	selector := mwc.DeepCopy()
	selector.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"nobody": "matches"}}
	kit.ExpectDenied(t, op.Update(ctx, selector), "only the caBundle")
	relabel := mwc.DeepCopy()
	relabel.Labels = map[string]string{"x": "y"}
	kit.ExpectDenied(t, op.Update(ctx, relabel), "only the caBundle")
	owned := mwc.DeepCopy()
	owned.OwnerReferences = []metav1.OwnerReference{ghost}
	kit.ExpectDenied(t, op.Update(ctx, owned), "only the caBundle")
	held := mwc.DeepCopy()
	held.Finalizers = append(held.Finalizers, vocab.FinalizerRevocation)
	kit.ExpectDenied(t, op.Update(ctx, held), "only the caBundle")
	if err := op.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "evil"}}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator creating a webhook configuration: %v, want forbidden", err)
	}

	// RuntimeClasses: brewlet with handler brewlet, no other.
	kit.ExpectDenied(t, op.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-alias"}, Handler: "brewlet"}), "only the RuntimeClass brewlet")
	kit.ExpectDenied(t, op.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runc"}), "only the RuntimeClass brewlet")
	var k nodev1.RuntimeClass
	kit.Must(t, op.Get(ctx, client.ObjectKeyFromObject(kata), &k))
	k.Labels = map[string]string{"x": "y"}
	if err := op.Update(ctx, &k); !apierrors.IsForbidden(err) {
		t.Errorf("the operator updating RuntimeClass kata: %v, want forbidden by RBAC", err)
	}
	if err := op.Delete(ctx, kata); !apierrors.IsForbidden(err) {
		t.Errorf("the operator deleting RuntimeClass kata: %v, want forbidden by RBAC", err)
	}
	var rc nodev1.RuntimeClass
	if err := c.Get(ctx, client.ObjectKey{Name: "brewlet"}, &rc); err == nil {
		rc.Labels = map[string]string{"brewlet.sh/test": "1"}
		if err := op.Update(ctx, &rc); err != nil {
			t.Errorf("the operator repairing RuntimeClass brewlet: %v", err)
		}
	} else if err := op.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "brewlet"}, Handler: "brewlet"}); err != nil {
		t.Errorf("the operator creating RuntimeClass brewlet: %v", err)
	}
}
