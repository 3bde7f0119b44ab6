//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/signature"
	"brewlet.sh/brewlet/test/benchratio"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// copyTo copies the runtime images refs name from the run's runtime image store (where
// BuildRuntimes keeps every set it built) to a TLS registry that requires credentials, under
// the same repository paths.
func copyTo(t *testing.T, refs map[string]string, reg *framework.Registry, user, password string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, ref := range refs {
		src, err := name.NewDigest(ref)
		if err != nil {
			t.Fatal(err)
		}
		img := kit.KeptRuntime(t, src.DigestStr())
		dst, err := name.NewDigest(reg.Addr + "/" + src.RepositoryStr() + "@" + src.DigestStr())
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(dst, img, remote.WithTransport(reg.Transport()), remote.WithAuth(&authn.Basic{Username: user, Password: password})); err != nil {
			t.Fatalf("copy %s to %s: %v", ref, reg.Addr, err)
		}
		out[k] = dst.String()
	}
	return out
}

// The install against `ctr image pull` through the path production registries take: TLS
// with a CA of the registries' own, credentials on every host, and a mirror the node knows
// only from its containerd hosts.toml (both ways read the same file). Cold install and the
// rotation to the security update, as TestBenchInstall.
func TestBenchInstallTLS(t *testing.T) {
	reps := envInt("BENCH_REPS", benchReps)
	const user, password = "bench", "bench-s3cret"
	var cold, rotation [2][]float64 // [ctr, brewlet]
	var signed [2][]float64         // cold installs [without, with] a required signature
	for rep := range reps {
		t.Run(fmt.Sprintf("rep%d", rep), func(t *testing.T) {
			n := framework.StartNode(t)
			plain := kit.BuildRuntimes(t, n.Registry, "python")
			origin := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: user, Password: password})
			mirror := framework.StartRegistryOpts(t, framework.RegistryOptions{TLS: true, User: user, Password: password})
			refs := copyTo(t, plain, origin, user, password)
			copyTo(t, plain, mirror, user, password)

			certs := filepath.Join(t.TempDir(), "certs.d")
			dir := filepath.Join(certs, origin.Addr)
			kit.Must(t, os.MkdirAll(dir, 0o755))
			for name, src := range map[string]string{"origin-ca.crt": origin.CAFile, "mirror-ca.crt": mirror.CAFile} {
				b, err := os.ReadFile(src)
				kit.Must(t, err)
				kit.Must(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
			}
			kit.Must(t, os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(fmt.Sprintf(`server = "https://%s"
ca = "origin-ca.crt"

[host."https://%s"]
  capabilities = ["pull", "resolve"]
  ca = "mirror-ca.crt"
`, origin.Addr, mirror.Addr)), 0o644))
			kit.DockerConfig(t, map[string][2]string{origin.Addr: {user, password}, mirror.Addr: {user, password}})

			host := hoststate.Under(n.HostPrefix)
			in := &install.Installer{Layout: host, Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, NodeHosts: registry.NodeHosts{Dir: certs}}
			ctr := framework.Tool(t, "ctr")
			pull := func(gen int) float64 {
				t0 := time.Now()
				cmd := exec.Command(ctr, "-a", n.Socket, "-n", "bench", "images", "pull", "--hosts-dir", certs, "--user", user+":"+password,
					refs[fmt.Sprintf("python%d", gen)])
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("ctr pull: %v\n%s", err, out)
				}
				return float64(time.Since(t0))
			}
			installGen := func(gen int) float64 {
				t0 := time.Now()
				res, err := in.Install(context.Background(), install.Request{ID: "py", Epoch: "4f2e3d1c-6b5a-4a98-9d0e-2f3a4b5c6d7e",
					Generation: int64(gen), Image: refs[fmt.Sprintf("python%d", gen)], UID: 10001, GID: 10001})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Skipped) != 0 {
					t.Fatalf("the mirror was skipped: %v", res.Skipped)
				}
				took := time.Since(t0)
				t.Logf("brewlet install of generation %d through TLS, credentials and the mirror: %s (%s)", gen, took.Round(time.Millisecond), res.Phases)
				return float64(took)
			}
			installRep(rep, [2]func(int) float64{pull, installGen}, &cold, &rotation)

			// The signature check's cost: cold installs of generation 1 into fresh layouts,
			// one requiring the key's signature (looked up through the same mirror path and
			// verified before any layer), one not, in alternating order.
			signer, err := signature.GenerateKey()
			kit.Must(t, err)
			kit.SignWith(t, origin, signer, refs["python1"], kit.DigestOf(refs["python1"]), user, password)
			kit.SignWith(t, mirror, signer, mirror.Addr+"/"+strings.SplitN(refs["python1"], "/", 2)[1], kit.DigestOf(refs["python1"]), user, password)
			pub, err := signer.PublicPEM()
			kit.Must(t, err)
			keys, err := signature.ParseKeys("bench", []string{string(pub)})
			kit.Must(t, err)
			coldInto := func(keys *signature.Requirement) float64 {
				fresh := hoststate.Under(t.TempDir())
				in := &install.Installer{Layout: fresh, Platform: in.Platform, NodeHosts: in.NodeHosts, SignatureKeys: keys}
				t0 := time.Now()
				if _, err := in.Install(context.Background(), install.Request{ID: "py", Epoch: "4f2e3d1c-6b5a-4a98-9d0e-2f3a4b5c6d7e",
					Generation: 1, Image: refs["python1"], UID: 10001, GID: 10001}); err != nil {
					t.Fatal(err)
				}
				return float64(time.Since(t0))
			}
			ways := [2]func() float64{func() float64 { return coldInto(nil) }, func() float64 { return coldInto(&keys) }}
			order := []int{0, 1}
			if rep%2 == 1 {
				order = []int{1, 0}
			}
			for _, w := range order {
				signed[w] = append(signed[w], ways[w]())
			}
			if !strings.Contains(refs["python1"], origin.Addr) {
				t.Fatalf("the reference %s does not name the origin", refs["python1"])
			}
		})
	}
	benchGuard(t, fmt.Sprintf("install through TLS, credentials and a hosts.toml mirror (CPython runtime, %d repetitions)", reps), []benchratio.Row{
		ratioRow("install: cold, against ctr image pull + unpack (TLS, auth, mirror)", cold, dur, "≤ 0.8×"),
		ratioRow("install: rotation (TLS, auth, mirror)", rotation, dur, "∝ changed bytes"),
		ratioRow("install: cold with a required signature, against without (TLS, auth, mirror)", signed, dur, "≤ 1.1×"),
	})
}
