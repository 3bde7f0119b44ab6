//go:build bench

package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/test/framework"
)

// countingTransport counts the bytes read from and sent to a registry.
type countingTransport struct {
	rt       http.RoundTripper
	down, up atomic.Int64
}

// newCountingTransport counts what goes through the harness's registry transport (TLS with
// the test process's registry authority trusted).
func newCountingTransport(t *testing.T) *countingTransport {
	return &countingTransport{rt: framework.RegistryTransport(t)}
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body = &countingBody{ReadCloser: req.Body, n: &c.up}
	}
	resp, err := c.rt.RoundTrip(req)
	if err == nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.down}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// burst is one way's BENCH_CONCURRENT creates at once: each create+start's latency, and
// the containers.
type burst struct {
	lat []time.Duration
	ids []string
}

// concurrent creates and starts, at once, BENCH_CONCURRENT (20) containers of one already
// pulled image in pods already running, for each way in order (runc with the conventional
// image of app 0, brewlet with its artifact).
func (p *payoff) concurrent(ways [2]*payWay, order []int) [2]burst {
	t, n, ctx := p.t, p.d.N, context.Background()
	k := envInt("BENCH_CONCURRENT", 20)
	var out [2]burst
	for _, wi := range order {
		w := ways[wi]
		ref := w.publish(0, 0, 1)
		ctrs := make([]*payCtr, k)
		for i := range ctrs {
			pod := n.PodConfig(fmt.Sprintf("%s-conc%d", w.key, i), w.ann)
			podID, err := n.RunPod(ctx, pod, w.handler)
			if err != nil {
				t.Fatalf("run pod: %v", err)
			}
			ctrs[i] = &payCtr{podID: podID, pod: pod}
		}
		if err := n.Pull(ctx, ref, ctrs[0].pod); err != nil {
			t.Fatal(err)
		}
		ds := make([]time.Duration, k)
		errs := make(chan error, k)
		start := make(chan struct{})
		for i, c := range ctrs {
			go func() {
				<-start
				t0 := time.Now()
				r, err := n.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: c.podID, Config: p.containerConfig(w, ref, 0), SandboxConfig: c.pod})
				if err == nil {
					c.cid = r.ContainerId
					_, err = n.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.cid})
				}
				ds[i] = time.Since(t0)
				errs <- err
			}()
		}
		close(start)
		for range ctrs {
			if err := <-errs; err != nil {
				t.Fatalf("%s: concurrent create+start: %v", w.title, err)
			}
		}
		for _, c := range ctrs {
			p.waitLog(c, "listening")
			out[wi].ids = append(out[wi].ids, c.cid)
			p.removePod(c)
		}
		out[wi].lat = ds
	}
	return out
}
