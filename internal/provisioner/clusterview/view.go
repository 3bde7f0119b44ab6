package clusterview

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
)

// View is the agent's picture of the NodeProfiles and RuntimeImages. Informers keep it
// current; before a pass trusts it, one metadata-only quorum read per kind (names and
// resourceVersions, never status) confirms that the informers hold exactly what the API
// server holds. A pass therefore costs the same however large RuntimeImage status grows,
// and the fleet's agents never list every object every period. When the two disagree (an
// event still in flight, a watch that broke), the pass confirms again and, after a few
// tries, reads everything with full quorum lists: the view may be slow, never stale.
type View struct {
	Cache  cache.Cache
	Direct client.Reader // uncached: every read is a quorum read
	// Confirmed and Fallbacks count passes confirmed from the informers and passes that
	// needed full lists (for metrics and benchmarks).
	Confirmed, Fallbacks atomic.Int64
}

// viewTries is how often a pass tries to confirm the informers before listing everything.
const viewTries = 3

// NewView builds the informers (not started: see Start). What the agent never reads is
// dropped before it is cached, so an agent's memory does not grow with the fleet: managed
// fields, and RuntimeImage rotation progress and task observations (other nodes' news).
func NewView(cfg *rest.Config, scheme *k8sruntime.Scheme, direct client.Reader) (*View, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ReaderFailOnMissingInformer: true,
		DefaultTransform: stripForAgent})
	if err != nil {
		return nil, err
	}
	return &View{Cache: c, Direct: direct}, nil
}

func stripForAgent(in any) (any, error) {
	if o, ok := in.(client.Object); ok {
		o.SetManagedFields(nil)
	}
	if ri, ok := in.(*brewletv1.RuntimeImage); ok {
		ri.Status.Rotation = nil
		ri.Status.TaskObservations = nil
	}
	return in, nil
}

// Start runs the informers until ctx ends and returns once they hold a first full list.
// A change to a RuntimeImage's approval, epoch or generation, or its deletion, sends on
// wake (without blocking): the agent acts on it before its next periodic pass.
func (v *View) Start(ctx context.Context, wake chan<- struct{}) error {
	if _, err := v.Cache.GetInformer(ctx, &brewletv1.NodeProfile{}); err != nil {
		return err
	}
	inf, err := v.Cache.GetInformer(ctx, &brewletv1.RuntimeImage{})
	if err != nil {
		return err
	}
	send := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			_, a, _ := runtimeImageKey(oldObj)
			_, b, _ := runtimeImageKey(newObj)
			if a != b {
				send()
			}
		},
		DeleteFunc: func(any) { send() },
	}); err != nil {
		return err
	}
	go func() { _ = v.Cache.Start(ctx) }()
	if !v.Cache.WaitForCacheSync(ctx) {
		return errors.New("the NodeProfile and RuntimeImage informers did not sync")
	}
	return nil
}

// Collectors export how passes read the cluster: confirmed from the informers, or from
// full lists after the informers could not be confirmed (a steady rise means watches keep
// breaking or a RuntimeImage changes faster than a pass can confirm it).
func (v *View) Collectors() []prometheus.Collector {
	counter := func(outcome string, c *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "brewlet_provisioner_cluster_reads_total",
			Help:        "Agent passes by how they read NodeProfiles and RuntimeImages (confirmed informers, or full lists).",
			ConstLabels: prometheus.Labels{"outcome": outcome}}, func() float64 { return float64(c.Load()) })
	}
	return []prometheus.Collector{counter("confirmed", &v.Confirmed), counter("fallback", &v.Fallbacks)}
}

// Read returns the profiles and runtime images as the API server holds them: no older than
// the moment Read was called.
func (v *View) Read(ctx context.Context) ([]brewletv1.NodeProfile, []brewletv1.RuntimeImage, error) {
	for try := range viewTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(time.Duration(100<<try) * time.Millisecond):
			}
		}
		profileVersions, err := v.versions(ctx, "NodeProfileList")
		if err != nil {
			return nil, nil, err
		}
		imageVersions, err := v.versions(ctx, "RuntimeImageList")
		if err != nil {
			return nil, nil, err
		}
		var profiles brewletv1.NodeProfileList
		var images brewletv1.RuntimeImageList
		if err := v.Cache.List(ctx, &profiles); err != nil {
			return nil, nil, err
		}
		if err := v.Cache.List(ctx, &images); err != nil {
			return nil, nil, err
		}
		if sameVersions(profileVersions, objects(profiles.Items)) && sameVersions(imageVersions, objects(images.Items)) {
			v.Confirmed.Add(1)
			return profiles.Items, images.Items, nil
		}
	}
	v.Fallbacks.Add(1)
	profiles, images, err := ListDirect(ctx, v.Direct)
	for i := range profiles {
		_, _ = stripForAgent(&profiles[i])
	}
	for i := range images {
		_, _ = stripForAgent(&images[i])
	}
	return profiles, images, err
}

// ListDirect reads every NodeProfile and RuntimeImage with quorum lists.
func ListDirect(ctx context.Context, c client.Reader) ([]brewletv1.NodeProfile, []brewletv1.RuntimeImage, error) {
	var profiles brewletv1.NodeProfileList
	if err := c.List(ctx, &profiles); err != nil {
		return nil, nil, fmt.Errorf("list NodeProfiles: %w", err)
	}
	var images brewletv1.RuntimeImageList
	if err := c.List(ctx, &images); err != nil {
		return nil, nil, fmt.Errorf("list RuntimeImages: %w", err)
	}
	return profiles.Items, images.Items, nil
}

// versions is a metadata-only quorum list of one kind: name → resourceVersion.
func (v *View) versions(ctx context.Context, listKind string) (map[string]string, error) {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(brewletv1.GroupVersion.WithKind(listKind))
	if err := v.Direct.List(ctx, l); err != nil {
		return nil, fmt.Errorf("confirm the cached %ss: %w", listKind[:len(listKind)-len("List")], err)
	}
	out := make(map[string]string, len(l.Items))
	for _, o := range l.Items {
		out[o.Name] = o.ResourceVersion
	}
	return out, nil
}

// objects views a typed list's items as client.Objects.
func objects[T any, P interface {
	*T
	client.Object
}](items []T) []client.Object {
	out := make([]client.Object, len(items))
	for i := range items {
		out[i] = P(&items[i])
	}
	return out
}

// sameVersions reports whether the cached objects are exactly the ones the API server
// listed: the same names, each at the same resourceVersion.
func sameVersions(server map[string]string, cached []client.Object) bool {
	if len(server) != len(cached) {
		return false
	}
	for _, o := range cached {
		if rv, ok := server[o.GetName()]; !ok || rv != o.GetResourceVersion() {
			return false
		}
	}
	return true
}
