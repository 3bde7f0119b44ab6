package controlplane

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// attack is one write an identity tries: allowed when want is "", otherwise refused as
// Forbidden with want in the message (the rule that refuses it).
type attack struct {
	what  string
	write func() error
	want  string
}

func runAttacks(t *testing.T, who string, attacks []attack) {
	t.Helper()
	for _, a := range attacks {
		err := a.write()
		t.Logf("%s %s: %v", who, a.what, err)
		switch {
		case a.want == "" && err != nil:
			t.Errorf("%s %s: %v, want allowed", who, a.what, err)
		case a.want != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), a.want)):
			t.Errorf("%s %s: %v, want Forbidden mentioning %q", who, a.what, err, a.want)
		}
	}
}

// mergePatch is a server-side dry-run merge patch of obj (status when sub is "status").
func mergePatch(c client.Client, obj client.Object, sub, patch string) error {
	p := client.RawPatch(types.MergePatchType, []byte(patch))
	if sub == "status" {
		return c.Status().Patch(context.Background(), obj, p, client.DryRunAll)
	}
	return c.Patch(context.Background(), obj, p, client.DryRunAll)
}

func nodeLabelPatch(key, value string) string {
	return `{"metadata":{"labels":{"` + key + `":"` + value + `"}}}`
}

// chartKubeletAttacks: the kubelet of node n1, with its own credentials (the Node
// authorizer and NodeRestriction judge it), cannot give its node a Brewlet scheduling label,
// nor reach Brewlet's objects; the writes a kubelet needs stay allowed. The legacy
// brewlet.sh/runtime.<id> key is still writable by it, which is why nothing reads it.
func chartKubeletAttacks(t *testing.T, cp *framework.ControlPlane) {
	k := cp.KubeletClient(t, "n1")
	n1, n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}
	const nr = "node-restriction.kubernetes.io"
	runAttacks(t, "kubelet n1", []attack{
		{"labelling its Node with an ordinary label", func() error { return mergePatch(k, n1, "", nodeLabelPatch("topology.example/rack", "r1")) }, ""},
		{"writing its Node's status", func() error {
			return mergePatch(k, n1, "status", `{"status":{"capacity":{"example.com/widgets":"1"}}}`)
		}, ""},
		{"writing its heartbeat Lease", func() error {
			return k.Create(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: corev1.NamespaceNodeLease}}, client.DryRunAll)
		}, ""},
		{"setting the legacy, unread brewlet.sh/runtime.<id> label", func() error {
			return mergePatch(k, n1, "", nodeLabelPatch(vocab.LegacyLabelRuntimePrefix+"python-3.12", vocab.LabelValueReady))
		}, ""},
		{"claiming a runtime with " + vocab.RuntimeLabel("ruby-3"), func() error {
			return mergePatch(k, n1, "", nodeLabelPatch(vocab.RuntimeLabel("ruby-3"), vocab.LabelValueReady))
		}, nr},
		// The agent set these on n1; a kubelet can neither change nor withdraw them.
		{"changing " + vocab.LabelRuntime, func() error {
			return mergePatch(k, n1, "", nodeLabelPatch(vocab.LabelRuntime, vocab.LabelValueAvailable))
		}, nr},
		{"removing " + vocab.RuntimeLabel("python-3.12"), func() error {
			return mergePatch(k, n1, "", `{"metadata":{"labels":{"`+vocab.RuntimeLabel("python-3.12")+`":null}}}`)
		}, nr},
		// The chain a compromised node starts: join a pool or claim host changes to draw an
		// agent pod (and mint that pod's token). Pool keys and the placing host-changes key
		// are node-restriction labels; the old host-changes key places nothing any more.
		{"joining a pool", func() error { return mergePatch(k, n1, "", nodeLabelPatch(nr+"/pool", "claimed-by-its-kubelet")) }, nr},
		{"claiming host changes with " + vocab.LabelHostChanges, func() error {
			return mergePatch(k, n1, "", nodeLabelPatch(vocab.LabelHostChanges, vocab.LabelValuePresent))
		}, nr},
		{"setting the old, unread " + vocab.LegacyLabelHostChanges, func() error {
			return mergePatch(k, n1, "", nodeLabelPatch(vocab.LegacyLabelHostChanges, vocab.LabelValuePresent))
		}, ""},
		{"minting a token for the agents' service account with no agent pod on its node", func() error {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-provisioner", Namespace: kit.ChartNS}}
			return k.SubResource("token").Create(context.Background(), sa, &authenticationv1.TokenRequest{})
		}, "brewlet-provisioner"},
		{"labelling another Node", func() error { return mergePatch(k, n2, "", nodeLabelPatch("topology.example/rack", "r1")) }, "n2"},
		{"writing its NodeRuntime's status", func() error {
			return mergePatch(k, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, "status", `{"status":{"runtimes":[]}}`)
		}, "noderuntimes"},
		{"taking its agent's writer Lease", func() error {
			return k.Create(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-provisioner-n1", Namespace: kit.ChartNS}}, client.DryRunAll)
		}, "leases"},
		{"changing a RuntimeImage", func() error {
			return mergePatch(k, &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "attack-target"}}, "", `{"spec":{"revoked":false}}`)
		}, "runtimeimages"},
		{"creating a RuntimeClass", func() error {
			return k.Create(context.Background(), &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "k"}, Handler: "runc"}, client.DryRunAll)
		}, "runtimeclasses"},
	})
}

// chartTenantAttacks: a tenant who may write the workloads of namespace shop writes them,
// but nothing of Brewlet's, no Node and nothing outside shop.
func chartTenantAttacks(t *testing.T, cp *framework.ControlPlane) {
	ctx := context.Background()
	const ns = "shop"
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// What a namespace's developers typically hold (the "edit" role aggregates its rules in
	// kube-controller-manager, which this control plane does not run).
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "shop-dev", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"", "apps"}, Resources: []string{"pods", "configmaps", "secrets", "services", "deployments", "statefulsets", "daemonsets"}, Verbs: []string{"*"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "shop-dev", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "shop-dev"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "shop-devs"}}}
	for _, o := range []client.Object{role, binding} {
		if err := cp.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	u := cp.UserClient(t, "alice", "shop-devs")
	deployment := func(namespace string) *appsv1.Deployment {
		labels := map[string]string{"app": "web"}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace,
			Annotations: map[string]string{vocab.AnnotationRestartOnRotation: "true"}},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{vocab.AnnotationRuntimeImage: "python-3.12"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/apps/web@" + kit.GoodDigest}}}}}}
	}
	dry := func(obj client.Object) func() error {
		return func() error { return u.Create(ctx, obj, client.DryRunAll) }
	}
	runAttacks(t, "tenant alice (developer in shop)", []attack{
		// Waiting for the RoleBinding to reach the authorizer is what the first write does.
		{"creating an opted-in Deployment in shop", func() error {
			var err error
			for range 100 {
				if err = dry(deployment(ns))(); !apierrors.IsForbidden(err) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			return err
		}, ""},
		{"creating a Deployment in default", dry(deployment("default")), "forbidden"},
		{"creating a RuntimeImage", dry(kit.RuntimeImage("tenant-python", "registry.example/runtimes/python@"+kit.GoodDigest)), "runtimeimages"},
		{"widening a NodeProfile", func() error {
			return mergePatch(u, &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}}, "", `{"spec":{"nodePool":{"names":["gpu"]}}}`)
		}, "nodeprofiles"},
		{"revoking or un-revoking a RuntimeImage", func() error {
			return mergePatch(u, &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "attack-target"}}, "", `{"spec":{"revoked":false}}`)
		}, "runtimeimages"},
		{"writing a NodeRuntime", dry(&brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n9"}}), "noderuntimes"},
		{"labelling a Node ready for a runtime", func() error {
			return mergePatch(u, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, "", nodeLabelPatch(vocab.RuntimeLabel("python-3.12"), "ready"))
		}, "nodes"},
		{"repointing RuntimeClass brewlet", func() error {
			return mergePatch(u, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: vocab.RuntimeClassName}}, "", `{"metadata":{"labels":{"x":"y"}}}`)
		}, "runtimeclasses"},
		{"reading the webhook's certificate Secret", func() error {
			return u.Get(ctx, client.ObjectKey{Namespace: kit.ChartNS, Name: admission.SecretName}, &corev1.Secret{})
		}, "secrets"},
		{"switching the pod webhook off", func() error {
			return mergePatch(u, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: admission.ConfigurationName}}, "", `{"webhooks":[]}`)
		}, "mutatingwebhookconfigurations"},
		{"recording a node as retired", dry(&brewletv1.NodeRetirementEvidence{ObjectMeta: metav1.ObjectMeta{Name: "n1-retired"}}), "noderetirementevidences"},
	})
}
