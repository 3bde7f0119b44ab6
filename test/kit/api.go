package kit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

const GoodDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func RuntimeImage(name, image string) *brewletv1.RuntimeImage {
	return &brewletv1.RuntimeImage{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: brewletv1.RuntimeImageSpec{
			Source: brewletv1.RuntimeImageSource{Image: image},
			User:   brewletv1.RuntimeUser{UID: 10001, GID: 10001},
		},
	}
}

// WriteStatus rewrites node's NodeRuntime status as c. A live agent writes the same
// object, so a conflict (which the API server reports only after authorizing the
// write) is retried rather than read as an answer.
func WriteStatus(ctx context.Context, c client.Client, node string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		nrt := &brewletv1.NodeRuntime{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, nrt); err != nil {
			return err
		}
		nrt.Status.Complete = true
		nrt.Status.ObservedAt = &metav1.Time{Time: time.Now().Truncate(time.Second)}
		return c.Status().Update(ctx, nrt)
	})
}

func LabelNode(ctx context.Context, c client.Client, node, key, value string) error {
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return err
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Labels[key] = value
	return c.Patch(ctx, n, patch)
}

func DigestOf(image string) string {
	_, d, _ := strings.Cut(image, "@")
	return d
}

func DigestN(n int) string { return fmt.Sprintf("sha256:%064x", n) }

// UpdateRI applies fn to the latest RuntimeImage and retries on conflicts, as a human's
// kubectl edit racing other editors would.
func UpdateRI(t *testing.T, c client.Client, name string, fn func(*brewletv1.RuntimeImage)) {
	t.Helper()
	for {
		ri := &brewletv1.RuntimeImage{}
		if err := c.Get(context.Background(), types.NamespacedName{Name: name}, ri); err != nil {
			t.Errorf("get %s: %v", name, err)
			return
		}
		fn(ri)
		err := c.Update(context.Background(), ri)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Errorf("update %s: %v", name, err)
			return
		}
	}
}
