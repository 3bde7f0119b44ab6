//go:build bench

package bench

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

type payCtr struct {
	podID, cid string
	pod        *runtimeapi.PodSandboxConfig
	attempt    uint32
}

func (p *payoff) measure(w *payWay) {
	t, n, ctx := p.t, p.d.N, context.Background()
	baseContent, baseDisk := p.contentBytes(), p.nodeDisk()
	t.Logf("%s: node before: content %s, disk %s", w.title, mib(baseContent), mib(baseDisk))
	refs := make([]string, p.apps)
	for i := range refs {
		refs[i] = w.publish(i, 0, 1)
	}
	for _, ref := range refs {
		m, err := p.remoteImage(ref).Manifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range m.Layers {
			if !w.baseLayer[l.Digest] {
				w.appBytes += l.Size
			}
		}
	}
	var removable []string
	removable = append(removable, refs...)

	w.pulled = 0
	if w.nodePrep != nil {
		w.pulled += w.nodePrep()
	}
	ctrs := make([]*payCtr, p.apps)
	for i := range ctrs {
		c, d, _ := p.startApp(w, fmt.Sprintf("%s-app%d", w.key, i), refs[i])
		if i == 0 {
			w.firstStart = d
		}
		ctrs[i] = c
	}
	for _, c := range ctrs {
		p.waitLog(c, "listening")
	}
	w.pulled += p.contentBytes() - baseContent
	w.disk = p.nodeDisk() - baseDisk
	w.memPSS, w.memFile, w.memShared = p.appMemory(ctrs)
	w.shimPSS = shimPSS(t, n.Dir, w.handler)
	t.Logf("%s: %d apps running: pulled %s, disk %s", w.title, p.apps, mib(w.pulled), mib(w.disk))

	// A new version of one application, never on the node: pull + create + start.
	for r := 0; r < p.runs; r++ {
		ref := w.publish(r%p.apps, r+1, 1)
		removable = append(removable, ref)
		c, d, ready := p.startApp(w, fmt.Sprintf("%s-new%d", w.key, r), ref)
		w.cold, w.ready = append(w.cold, d), append(w.ready, ready)
		p.removePod(c)
	}

	// The CVE rotation to python2.
	newRefs := refs
	t0 := time.Now()
	pushedBefore := p.pushed.up.Load()
	if w.rebuilds {
		newRefs = make([]string, p.apps)
		for i := range newRefs {
			newRefs[i] = w.publish(i, 0, 2)
			if newRefs[i] != refs[i] {
				w.rotDigests++
			}
			w.rotImages++
		}
		removable = append(removable, newRefs...)
	}
	if w.rebuilds {
		w.rotPublish, w.rotPushed = time.Since(t0), p.pushed.up.Load()-pushedBefore
	}
	contentBefore := p.contentBytes()
	t0 = time.Now()
	if w.nodeRotate != nil {
		w.rotBytes += w.nodeRotate()
		w.rotFetch = time.Since(t0)
	}
	for i, c := range ctrs {
		if w.rebuilds {
			t1 := time.Now()
			if err := n.Pull(ctx, newRefs[i], c.pod); err != nil {
				t.Fatal(err)
			}
			w.rotFetch += time.Since(t1)
		}
		if i > 0 && !p.logged(ctrs[i-1], "listening") {
			w.rotOverlap++
		}
		r := p.restart(w, c, newRefs[i])
		w.rotStopOnly, w.rotRemove = append(w.rotStopOnly, r.stop), append(w.rotRemove, r.remove)
		w.rotCreate = append(w.rotCreate, r.create)
	}
	for _, c := range ctrs {
		p.waitLog(c, "listening")
	}
	w.rotWall = time.Since(t0)
	// The restarts once more, each on a node that is not starting anything else (the
	// previous one listens before the next stops): what the create+start figure compares.
	for i, c := range ctrs {
		w.setCreate = append(w.setCreate, p.restart(w, c, newRefs[i]).create)
		w.setIDs = append(w.setIDs, c.cid)
		p.waitLog(c, "listening")
	}
	w.rotBytes += p.contentBytes() - contentBefore
	t.Logf("%s: rotation: %d images rebuilt, %s pushed, %s to the node, %s node-side", w.title, w.rotImages, mib(w.rotPushed), mib(w.rotBytes), w.rotWall.Round(time.Millisecond))

	for _, c := range ctrs {
		p.removePod(c)
	}
	for _, ref := range removable {
		if _, err := n.Images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
			t.Logf("remove image %s: %v", ref, err)
		}
	}
	t.Logf("%s: node after removing its pods and images: content %s, disk %s (containerd's GC)", w.title, mib(p.contentBytes()), mib(p.nodeDisk()))
}

func (p *payoff) containerConfig(w *payWay, ref string, attempt uint32) *runtimeapi.ContainerConfig {
	c := framework.ContainerConfig("app", ref)
	c.Metadata.Attempt = attempt
	c.LogPath = fmt.Sprintf("app-%d.log", attempt)
	// Confined alike in every way, as the shim bench does (restrictedContext): a stock
	// container without a filter skips runc's seccomp work that every Brewlet container,
	// and every restricted stock pod, pays.
	c.Linux.SecurityContext = restrictedContext(10001)
	return c
}

// startApp runs a pod, then times pull + create + start of ref in it (and until the
// application logged that it listens).
func (p *payoff) startApp(w *payWay, podName, ref string) (*payCtr, time.Duration, time.Duration) {
	t, n, ctx := p.t, p.d.N, context.Background()
	pod := n.PodConfig(podName, w.ann)
	podID, err := n.RunPod(ctx, pod, w.handler)
	if err != nil {
		t.Fatalf("run pod: %v", err)
	}
	c := &payCtr{podID: podID, pod: pod}
	t0 := time.Now()
	if c.cid, err = n.CreateStart(ctx, podID, pod, p.containerConfig(w, ref, 0)); err != nil {
		t.Fatalf("start %s: %v", ref, err)
	}
	d := time.Since(t0)
	p.waitLog(c, "listening")
	return c, d, time.Since(t0)
}

// restart stops a container and starts ref in its pod (what a rollout or the rotation does
// to a running application) and returns how long each step took.
func (p *payoff) restart(w *payWay, c *payCtr, ref string) restartTimes {
	t, n, ctx := p.t, p.d.N, context.Background()
	t0 := time.Now()
	if _, err := n.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.cid, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	var rt restartTimes
	rt.stop = time.Since(t0)
	tr := time.Now()
	if _, err := n.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.cid}); err != nil {
		t.Fatal(err)
	}
	c.attempt++
	t1 := time.Now()
	rt.remove = t1.Sub(tr)
	r, err := n.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: c.podID, Config: p.containerConfig(w, ref, c.attempt), SandboxConfig: c.pod})
	if err != nil {
		t.Fatal(err)
	}
	c.cid = r.ContainerId
	if _, err := n.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.cid}); err != nil {
		t.Fatal(err)
	}
	rt.create = time.Since(t1)
	return rt
}

// restartTimes are the CRI calls of one restart: StopContainer, RemoveContainer, and
// CreateContainer + StartContainer.
type restartTimes struct{ stop, remove, create time.Duration }

func (p *payoff) removePod(c *payCtr) {
	ctx := context.Background()
	_, _ = p.d.N.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: c.podID})
	if _, err := p.d.N.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: c.podID}); err != nil {
		p.t.Fatal(err)
	}
}

// logged reports whether the current container of c has logged want.
func (p *payoff) logged(c *payCtr, want string) bool {
	b, err := os.ReadFile(filepath.Join(c.pod.LogDirectory, fmt.Sprintf("app-%d.log", c.attempt)))
	return err == nil && strings.Contains(string(b), want)
}

// waitLog waits (60 s at most) for the current container of c to log want.
func (p *payoff) waitLog(c *payCtr, want string) {
	path := filepath.Join(c.pod.LogDirectory, fmt.Sprintf("app-%d.log", c.attempt))
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			st, _ := p.d.N.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: c.cid})
			b, _ := os.ReadFile(path)
			p.t.Fatalf("container %s did not log %q in 60s (status %v): %s", c.cid, want, st.GetStatus().GetState(), b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// appMemory reads smaps_rollup of every application process: PSS, the PSS of its file
// pages (interpreter, libraries, mapped code) and the pages it shares with other processes
// (clean or dirty: pages containerd just unpacked may not be written back yet), in KiB.
// File pages are shared only when the files are the same inodes (the same snapshot or
// layer cache directory).
func (p *payoff) appMemory(ctrs []*payCtr) (pss, file, shared []int) {
	for _, c := range ctrs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", kit.ContainerPID(p.t, p.d.N, c.cid)))
		if err != nil {
			p.t.Fatal(err)
		}
		f := map[string]int{}
		for _, l := range strings.Split(string(b), "\n") {
			if kv := strings.Fields(l); len(kv) >= 2 {
				v, _ := strconv.Atoi(kv[1])
				f[strings.TrimSuffix(kv[0], ":")] = v
			}
		}
		pss, file, shared = append(pss, f["Pss"]), append(file, f["Pss_File"]), append(shared, f["Shared_Clean"]+f["Shared_Dirty"])
	}
	return pss, file, shared
}

// contentBytes is the size of every blob in containerd's content store: what was pulled.
func (p *payoff) contentBytes() int64 {
	var sum int64
	_ = filepath.WalkDir(filepath.Join(p.contentDir, "blobs"), func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				sum += fi.Size()
			}
		}
		return nil
	})
	return sum
}

// nodeDisk is the disk used (allocated blocks, each inode once) by containerd's content
// store and overlayfs snapshots, plus Brewlet's runtimes and layer cache.
func (p *payoff) nodeDisk() int64 {
	host := p.d.Host
	seen := map[uint64]bool{}
	var sum int64
	for _, dir := range []string{p.contentDir, p.snapDir, host.Runtimes, host.State} {
		_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := e.Info()
			if err != nil {
				return nil
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && !seen[st.Ino] {
				seen[st.Ino] = true
				sum += st.Blocks * 512
			}
			return nil
		})
	}
	return sum
}
