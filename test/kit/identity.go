package kit

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"brewlet.sh/brewlet/test/framework"
)

// SAToken creates service account ns/name (bound to get /metrics when reader) and returns a
// token of it.
func SAToken(t *testing.T, cp *framework.ControlPlane, ns, name string, reader bool) string {
	t.Helper()
	ctx, c := context.Background(), cp.Client
	create := func(err error) {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	create(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}))
	if reader {
		create(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-metrics-reader"},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}))
		create(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-metrics-reader-" + ns + "-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "test-metrics-reader"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}))
	}
	return tokenOf(t, cp.Config, ns, name, nil)
}

// SAClient is a client with a token of service account ns/sa, bound to pod when it is not
// nil (as the kubelet mounts it), unbound otherwise.
func SAClient(t *testing.T, admin *rest.Config, ns, sa string, pod *corev1.Pod) client.Client {
	t.Helper()
	user := rest.AnonymousClientConfig(admin)
	user.BearerToken = tokenOf(t, admin, ns, sa, pod)
	c, err := client.New(user, client.Options{Scheme: framework.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tokenOf is a token of service account ns/sa, bound to pod when it is not nil.
func tokenOf(t *testing.T, admin *rest.Config, ns, sa string, pod *corev1.Pod) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	req := &authenticationv1.TokenRequest{}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
