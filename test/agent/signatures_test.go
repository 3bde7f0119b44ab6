package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/agent"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/signature"
	"brewlet.sh/brewlet/internal/testutil/fulciotest"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// waitSignature waits until ri's SignatureVerified condition has reason and returns ri.
func waitSignature(t *testing.T, c client.Client, name string, reason vocab.Reason) *brewletv1.RuntimeImage {
	t.Helper()
	ri := &brewletv1.RuntimeImage{}
	var last *metav1.Condition
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, ri); err != nil {
			t.Fatal(err)
		}
		last = meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionSignatureVerified))
		if last != nil && last.Reason == string(reason) && last.ObservedGeneration == ri.Generation {
			return ri
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("RuntimeImage %s: SignatureVerified %+v; want reason %s", name, last, reason)
	return nil
}

// Signed approval on real components: brewlet-operator (its own process, the chart's RBAC)
// reads signatures from a TLS registry that requires credentials and approves only digests
// the cluster's key signed; a rotation to an unsigned digest, one signed by another key or
// one carrying another digest's signature stops at approval and no node changes; and a node
// verifies on its own, so a status written by someone else (an operator that is down, lying
// or compromised) installs nothing unsigned. The registry (distribution) has no referrers
// API: signatures are found through the referrers tag.
func TestSignedApproval(t *testing.T) {
	framework.RequireRoot(t)
	ctx := context.Background()
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{})
	reg := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: "signer", Password: "sign-s3cret"})
	kit.DockerConfig(t, map[string][2]string{reg.Addr: {"signer", "sign-s3cret"}})
	base := kit.ShellImage(t)
	refs := map[string]string{}
	for _, gen := range []string{"signed-1", "signed-2", "unsigned", "other-key", "other-digest"} {
		refs[gen] = kit.PushTo(t, reg, "runtimes/shell", kit.WithFile(t, base, "etc/generation", gen), "signer", "sign-s3cret")
	}
	platform, err := signature.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := signature.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, gen := range []string{"signed-1", "signed-2"} {
		kit.SignWith(t, reg, platform, refs[gen], kit.DigestOf(refs[gen]), "signer", "sign-s3cret")
	}
	kit.SignWith(t, reg, stranger, refs["other-key"], kit.DigestOf(refs["other-key"]), "signer", "sign-s3cret")
	// The platform key's signature of signed-1, attached to other-digest.
	kit.SignWith(t, reg, platform, refs["other-digest"], kit.DigestOf(refs["signed-1"]), "signer", "sign-s3cret")

	pub, err := platform.PublicPEM()
	if err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "keys.pem")
	if err := os.WriteFile(keys, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	// A keyless signing CA of the test's own and the trusted root that trusts it.
	fulcio, err := fulciotest.New()
	if err != nil {
		t.Fatal(err)
	}
	rootJSON, err := fulcio.TrustedRoot()
	if err != nil {
		t.Fatal(err)
	}
	rootFile := filepath.Join(t.TempDir(), "trusted_root.json")
	if err := os.WriteFile(rootFile, rootJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	op := kit.StartOperatorFlags(t, cp, nil, "--leader-elect=false", "--signature-keys="+keys, "--signature-trusted-root="+rootFile,
		"--registry-ca-file="+reg.CAFile)

	c := cp.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const nodeName, id = "node-signed", "shell"
	must(c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"node-restriction.kubernetes.io/pool": "general"}}}))
	ri := kit.RuntimeImage(id, refs["signed-1"])
	must(c.Create(ctx, ri))
	kit.WaitGeneration(t, c, ri, 1)
	waitSignature(t, c, id, vocab.ReasonSignatureVerified)
	np := &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: brewletv1.NodeProfileSpec{
		NodePool:      brewletv1.NodePool{Key: "node-restriction.kubernetes.io/pool", Names: []string{"general"}},
		RuntimeImages: []brewletv1.OfferedRuntime{{ID: id, Install: "Eager"}}}}
	must(c.Create(ctx, np))

	trust, err := registry.LoadTrust([]string{reg.CAFile})
	must(err)
	cluster, err := signature.LoadKeyFile(signature.ClusterSource, keys)
	must(err)
	trustedRoot, err := signature.LoadTrustedRoot(rootFile)
	must(err)
	root := t.TempDir()
	host := hoststate.Under(root)
	ag := &agent.Agent{Client: c, NodeName: nodeName, Layout: host, AuthTTL: 2 * time.Minute, Log: t.Logf,
		Installer: &install.Installer{Layout: host, Platform: kit.LinuxAMD64, Trust: trust, SignatureKeys: &cluster, TrustedRoot: trustedRoot}}
	defer ag.Close()
	ag.Host = &brewletv1.NodeCleanup{ShimInstalled: true, ContainerdHandlerRegistered: true}
	must(host.CloseFence())
	must(ag.ReconcileAndWait(ctx))
	if cur, err := host.Current(id); err != nil || cur.Generation != 1 {
		t.Fatalf("current %+v %v; want generation 1 (signed by the cluster's key)", cur, err)
	}
	layers := kit.NodeTree(t, host.LayerDir(""))
	setImage := func(image string) {
		t.Helper()
		must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKey{Name: id}, ri); err != nil {
				return err
			}
			ri.Spec.Source.Image = image
			return c.Update(ctx, ri)
		}))
	}

	for _, tc := range []struct {
		name, gen string
		reason    vocab.Reason
		says      string
	}{
		{"a missing signature", "unsigned", vocab.ReasonSignatureMissing, "no Sigstore bundle"},
		{"a signature by another key", "other-key", vocab.ReasonSignatureInvalid, cluster.Keys[0].ID()},
		{"a signature of another digest", "other-digest", vocab.ReasonSignatureInvalid, "bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setImage(refs[tc.gen])
			got := waitSignature(t, c, id, tc.reason)
			sc := meta.FindStatusCondition(got.Status.Conditions, string(vocab.ConditionSignatureVerified))
			if !strings.Contains(sc.Message, tc.says) || !strings.Contains(sc.Message, "held") {
				t.Errorf("SignatureVerified message %q does not say %q and that the rotation is held", sc.Message, tc.says)
			}
			approved := meta.FindStatusCondition(got.Status.Conditions, string(vocab.ConditionApproved))
			if got.Status.Generation != 1 || got.Status.Digest != kit.DigestOf(refs["signed-1"]) || approved == nil || approved.Status != metav1.ConditionTrue {
				t.Fatalf("status generation %d digest %s Approved %+v; want generation 1 still approved", got.Status.Generation, got.Status.Digest, approved)
			}
			must(ag.ReconcileAndWait(ctx))
			if cur, err := host.Current(id); err != nil || cur.Generation != 1 {
				t.Fatalf("current %+v %v; want generation 1", cur, err)
			}
			if after := kit.NodeTree(t, host.LayerDir("")); !slices.Equal(layers, after) {
				t.Errorf("the node's layers changed:\nbefore %v\nafter  %v", layers, after)
			}
		})
	}

	t.Run("a signed rotation goes through", func(t *testing.T) {
		setImage(refs["signed-2"])
		kit.WaitGeneration(t, c, ri, 2)
		waitFor(t, 60*time.Second, "generation 2 on the node", func() bool {
			must(ag.ReconcileAndWait(ctx))
			cur, err := host.Current(id)
			return err == nil && cur.Generation == 2
		})
	})

	t.Run("a keyless identity the RuntimeImage requires, besides the cluster's key", func(t *testing.T) {
		const issuer = "https://token.actions.githubusercontent.com"
		const workflow = "https://github.com/example/runtimes/.github/workflows/release.yml@refs/heads/main"
		attachKeyless := func(ref, subject string) {
			t.Helper()
			d, err := registry.Digest(ref, false)
			must(err)
			b, err := fulcio.Bundle(issuer, subject, d.DigestStr())
			must(err)
			_, err = signature.Attach(ctx, d, b, remote.WithTransport(reg.Transport()), remote.WithAuth(&authn.Basic{Username: "signer", Password: "sign-s3cret"}))
			must(err)
		}
		attachKeyless(refs["signed-1"], workflow)
		attachKeyless(refs["signed-2"], "https://github.com/example/runtimes/.github/workflows/nightly.yml@refs/heads/main")
		kl := kit.RuntimeImage("keyless", refs["signed-1"])
		kl.Spec.Verification = &brewletv1.Verification{Keyless: []brewletv1.KeylessIdentity{{Issuer: issuer, Subject: workflow}}}
		must(c.Create(ctx, kl))
		kit.WaitGeneration(t, c, kl, 1)
		got := waitSignature(t, c, "keyless", vocab.ReasonSignatureVerified)
		if sc := meta.FindStatusCondition(got.Status.Conditions, string(vocab.ConditionSignatureVerified)); !strings.Contains(sc.Message, workflow) {
			t.Errorf("SignatureVerified %q does not name the identity", sc.Message)
		}
		must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKey{Name: np.Name}, np); err != nil {
				return err
			}
			np.Spec.RuntimeImages = append(np.Spec.RuntimeImages, brewletv1.OfferedRuntime{ID: "keyless", Install: "Eager"})
			return c.Update(ctx, np)
		}))
		waitFor(t, 60*time.Second, "the keyless-signed runtime on the node", func() bool {
			must(ag.ReconcileAndWait(ctx))
			cur, err := host.Current("keyless")
			return err == nil && cur.Generation == 1
		})
		// signed-2 carries the cluster key's signature, but its keyless one names another workflow.
		must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKey{Name: "keyless"}, kl); err != nil {
				return err
			}
			kl.Spec.Source.Image = refs["signed-2"]
			return c.Update(ctx, kl)
		}))
		got = waitSignature(t, c, "keyless", vocab.ReasonSignatureInvalid)
		if got.Status.Generation != 1 {
			t.Fatalf("generation %d; the rotation to a digest the required workflow did not sign must be held", got.Status.Generation)
		}
	})

	t.Run("the node does not take the operator's word for it", func(t *testing.T) {
		op.Stop()
		// What a lying or compromised operator would write: an approved generation of an
		// unsigned digest under a new ID the node's pool offers.
		forged := kit.RuntimeImage("forged", refs["unsigned"])
		must(c.Create(ctx, forged))
		forged.Status = brewletv1.RuntimeImageStatus{Epoch: forged.UID, Generation: 1, Digest: kit.DigestOf(refs["unsigned"]), ObservedGeneration: forged.Generation,
			TaskObservations: []brewletv1.TaskObservation{},
			Conditions: []metav1.Condition{{Type: string(vocab.ConditionApproved), Status: metav1.ConditionTrue, Reason: string(vocab.ReasonApproved),
				Message: "approved", ObservedGeneration: forged.Generation, LastTransitionTime: metav1.Now()}}}
		must(c.Status().Update(ctx, forged))
		must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKey{Name: np.Name}, np); err != nil {
				return err
			}
			np.Spec.RuntimeImages = append(np.Spec.RuntimeImages, brewletv1.OfferedRuntime{ID: "forged", Install: "Eager"})
			return c.Update(ctx, np)
		}))
		before := kit.NodeTree(t, host.LayerDir(""))
		must(ag.ReconcileAndWait(ctx))
		nrt := &brewletv1.NodeRuntime{}
		must(c.Get(ctx, client.ObjectKey{Name: nodeName}, nrt))
		var entry *brewletv1.NodeRuntimeEntry
		for i := range nrt.Status.Runtimes {
			if nrt.Status.Runtimes[i].ID == "forged" {
				entry = &nrt.Status.Runtimes[i]
			}
		}
		if entry == nil || entry.State != string(vocab.StateFailed) || entry.Reason != string(vocab.ReasonSignatureMissing) {
			t.Fatalf("NodeRuntime entry for forged: %+v; want Failed with SignatureMissing", entry)
		}
		if _, err := host.Current("forged"); err == nil {
			t.Fatal("the node installed an unsigned digest because a status said it was approved")
		}
		if after := kit.NodeTree(t, host.LayerDir("")); !slices.Equal(before, after) {
			t.Errorf("the node's layers changed:\nbefore %v\nafter  %v", before, after)
		}
	})
}
