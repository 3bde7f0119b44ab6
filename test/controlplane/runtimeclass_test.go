package controlplane

import (
	"context"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// chartRuntimeClassAliases: with the chart installed, not even a cluster administrator can
// create a second RuntimeClass for the brewlet handler (its pods would pass the webhook
// unjudged), while RuntimeClasses for other handlers stay theirs to create.
func chartRuntimeClassAliases(t *testing.T, cp *framework.ControlPlane) {
	ctx := context.Background()
	admin := client.NewDryRunClient(cp.Client)
	const policy = "brewlet-runtimeclass-handler"
	alias := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "fast-python"}, Handler: "brewlet"}
	kit.WaitDenied(t, "an administrator creating RuntimeClass fast-python with handler brewlet", policy, func() error {
		return admin.Create(ctx, alias.DeepCopy())
	})
	kit.ExpectDenied(t, admin.Create(ctx, alias.DeepCopy()), "use runtimeClassName brewlet")
	if err := admin.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}); err != nil {
		t.Errorf("an administrator creating RuntimeClass gvisor (handler runsc): %v", err)
	}
	var own nodev1.RuntimeClass
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: "brewlet"}, &own); err == nil {
		own.Labels = map[string]string{"team": "platform"}
		if err := admin.Update(ctx, &own); err != nil {
			t.Errorf("an administrator labelling RuntimeClass brewlet: %v", err)
		}
	}
}
