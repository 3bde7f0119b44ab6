// Package uninstall is what the chart's pre-delete hook runs before Brewlet is removed:
// delete every NodeProfile and RuntimeImage, then wait while the operator and the node
// agents clean the nodes up (the profiles' cleanup finalizers, the RuntimeImages'
// revocation finalizers). It never removes a finalizer: when cleanup cannot finish within
// the timeout it fails, naming the nodes and the steps still owed, and Helm keeps the
// release (operator and agents included) so cleanup can go on.
package uninstall

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// maxListed bounds the nodes a summary names.
const maxListed = 10

// bounded names at most maxListed of names and counts the rest.
func bounded(names []string) []string {
	if len(names) <= maxListed {
		return names
	}
	return append(slices.Clone(names[:maxListed]), fmt.Sprintf("and %d more", len(names)-maxListed))
}

// Run deletes every NodeProfile and RuntimeImage and waits until they are gone, printing
// what is still owed whenever it changes.
func Run(ctx context.Context, c client.Client, timeout, poll time.Duration, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var profiles brewletv1.NodeProfileList
	var images brewletv1.RuntimeImageList
	if err := c.List(ctx, &profiles); err != nil {
		return fmt.Errorf("list NodeProfiles: %w", err)
	}
	if err := c.List(ctx, &images); err != nil {
		return fmt.Errorf("list RuntimeImages: %w", err)
	}
	// Profiles first: their nodes revoke every ID they offer, which is what lets the
	// RuntimeImages' revocation finalizers go.
	for i := range profiles.Items {
		if err := client.IgnoreNotFound(c.Delete(ctx, &profiles.Items[i])); err != nil {
			return fmt.Errorf("delete NodeProfile %s: %w", profiles.Items[i].Name, err)
		}
	}
	for i := range images.Items {
		if err := client.IgnoreNotFound(c.Delete(ctx, &images.Items[i])); err != nil {
			return fmt.Errorf("delete RuntimeImage %s: %w", images.Items[i].Name, err)
		}
	}
	fmt.Fprintf(out, "deleted %d NodeProfile(s) and %d RuntimeImage(s); waiting for the nodes' cleanup (at most %s)\n",
		len(profiles.Items), len(images.Items), timeout)
	last := ""
	for {
		if err := c.List(ctx, &profiles); err != nil && ctx.Err() == nil {
			return fmt.Errorf("list NodeProfiles: %w", err)
		}
		if err := c.List(ctx, &images); err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("list RuntimeImages: %w", err)
		}
		owed := Owed(profiles.Items, images.Items)
		if owed == "" {
			// The agents remove the label once their host changes are reversed, just after
			// reporting it: until then the DaemonSet Helm is about to delete still has work.
			labeled, err := LabeledNodes(ctx, c)
			if err != nil && ctx.Err() == nil {
				return err
			}
			owed = OwedLabels(labeled)
		}
		if owed == "" {
			fmt.Fprintln(out, "every node is cleaned up: Brewlet can be removed")
			return nil
		}
		if owed != last {
			fmt.Fprintf(out, "%s still owed: %s\n", time.Now().UTC().Format(time.TimeOnly), owed)
			last = owed
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cleanup did not finish within %s, so Brewlet stays installed (the operator and the agents keep cleaning up; run helm uninstall again once done, see docs/uninstall.md). Still owed: %s", timeout, owed)
		case <-time.After(poll):
		}
	}
}

// LabeledNodes lists the nodes still labeled vocab.LabelHostChanges (metadata only).
func LabeledNodes(ctx context.Context, c client.Client) ([]string, error) {
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := c.List(ctx, nodes, client.MatchingLabels{vocab.LabelHostChanges: vocab.LabelValuePresent}); err != nil {
		return nil, fmt.Errorf("list nodes labeled %s: %w", vocab.LabelHostChanges, err)
	}
	var out []string
	for _, n := range nodes.Items {
		out = append(out, n.Name)
	}
	slices.Sort(out)
	return out, nil
}

// OwedLabels says which nodes' agents have not yet removed vocab.LabelHostChanges ("":
// none).
func OwedLabels(nodes []string) string {
	if len(nodes) == 0 {
		return ""
	}
	return fmt.Sprintf("nodes still labeled %s=%s, their agents finishing the cleanup: %s", vocab.LabelHostChanges,
		vocab.LabelValuePresent, strings.Join(bounded(nodes), ", "))
}

// Owed summarizes what keeps the objects: per profile, the nodes and the steps they still
// owe (from its ledger) and pending retirements; per RuntimeImage, that its nodes have not
// withdrawn it yet. "" when nothing is left.
func Owed(profiles []brewletv1.NodeProfile, images []brewletv1.RuntimeImage) string {
	var parts []string
	for _, p := range profiles {
		var nodes []string
		for _, e := range p.Status.Ledger {
			nodes = append(nodes, fmt.Sprintf("%s (uid %s: %s)", e.NodeName, e.NodeUID, strings.TrimPrefix(e.Message, "owes: ")))
		}
		slices.Sort(nodes)
		nodes = bounded(nodes)
		what := "its cleanup finalizer is not released yet"
		if len(nodes) > 0 {
			what = "nodes " + strings.Join(nodes, "; ")
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, string(vocab.ConditionRetirementPending)); c != nil && c.Status == "True" {
			what += " — " + c.Message
		}
		parts = append(parts, "NodeProfile "+p.Name+": "+what)
	}
	for _, ri := range images {
		what := "its nodes have not withdrawn it yet (kubectl get noderuntimes)"
		if c := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionApproved)); c != nil && c.Message != "" {
			what += "; " + c.Message
		}
		parts = append(parts, "RuntimeImage "+ri.Name+": "+what)
	}
	return strings.Join(parts, " | ")
}
