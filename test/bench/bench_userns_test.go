//go:build bench

package bench

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/test/benchratio"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The three ways TestBenchShimUserNamespaces starts a container.
const (
	usernsRunc    = iota // stock runc, hostUsers: false
	usernsBrewlet        // brewlet, hostUsers: false
	plainBrewlet         // brewlet, the node's user namespace
	usernsWays
)

// TestBenchShimUserNamespaces measures what a user namespace costs a Brewlet container
// (docs/shim.md, "User namespaces": each layer mapped on its own), on one node per
// repetition: create+start (first container and warm median) and shim memory per pod of
// brewlet with hostUsers: false against stock runc with hostUsers: false, and against brewlet
// without. The three ways take turns pod by pod (the order rotates), each pod with a range of
// IDs of its own as the kubelet gives them. Run with `make bench`.
func TestBenchShimUserNamespaces(t *testing.T) {
	pods, reps := envInt("BENCH_PODS", 10), envInt("BENCH_REPS", benchReps)
	cli := kit.BuildCLI(t)
	var first, warm, pss [usernsWays][]float64
	for rep := range reps {
		t.Run(fmt.Sprintf("rep%d", rep), func(t *testing.T) {
			s := newShimBenchWith(t, cli, framework.NodeOptions{AgentHandler: true})
			anns := shimAnnotations(s.id)
			handler := [usernsWays]int{usernsRunc: 0, usernsBrewlet: 1, plainBrewlet: 1}
			var ds [usernsWays][]time.Duration
			var podIDs [usernsWays]map[string]bool
			for w := range usernsWays {
				podIDs[w] = map[string]bool{}
			}
			for i := range pods {
				for j := range usernsWays {
					w := (i + j + rep) % usernsWays
					h := handler[w]
					var ns *runtimeapi.NamespaceOption
					if w != plainBrewlet {
						m := []*runtimeapi.IDMapping{{HostId: uint32(65536 * (16 + i*usernsWays + w)), ContainerId: 0, Length: 65536}}
						ns = &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}}
					}
					d, _, cid := s.createStart(t, fmt.Sprintf("way%d-%d", w, i), shimHandlers[h], s.image(h), anns[h], ns)
					ds[w] = append(ds[w], d)
					podIDs[w][podOf(t, s, cid)] = true
				}
			}
			time.Sleep(3 * time.Second) // idle shims, as TestBenchShim measures them
			for w := range usernsWays {
				first[w] = append(first[w], float64(ds[w][0]))
				warm[w] = append(warm[w], float64(medianOf(ds[w][1:])))
				pss[w] = append(pss[w], mean(shimPSSOf(t, s.n.Dir, shimHandlers[handler[w]], podIDs[w])))
			}
		})
	}
	pair := func(a, b int, m [usernsWays][]float64) [2][]float64 { return [2][]float64{m[a], m[b]} }
	benchGuard(t, fmt.Sprintf("user namespaces, brewlet against stock runc, both hostUsers: false (%d pods per way, %d repetitions)", pods, reps), []benchratio.Row{
		ratioRow("userns: PSS per pod (KiB)", pair(usernsRunc, usernsBrewlet, pss), kib, "≤ 1.1×"),
		ratioRow("userns: create+start, first container", pair(usernsRunc, usernsBrewlet, first), dur, "≤ 1.05×"),
		ratioRow("userns: create+start, warm (median)", pair(usernsRunc, usernsBrewlet, warm), dur, "≤ 1.05×"),
	})
	// What the user namespace adds to a Brewlet container ("stock" is brewlet without one).
	benchGuard(t, "user namespaces, brewlet with hostUsers: false against brewlet without", []benchratio.Row{
		ratioRow("userns cost: PSS per pod (KiB)", pair(plainBrewlet, usernsBrewlet, pss), kib, ""),
		ratioRow("userns cost: create+start, warm (median)", pair(plainBrewlet, usernsBrewlet, warm), dur, ""),
	})
}

// podOf is the pod sandbox a container runs in: its shim's -id.
func podOf(t *testing.T, s *shimBench, cid string) string {
	t.Helper()
	st, err := s.n.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: cid, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.SandboxID == "" {
		t.Fatalf("container %s: no sandbox in its status (%v)", cid, err)
	}
	return info.SandboxID
}
