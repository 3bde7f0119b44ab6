//go:build bench

package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
)

// burst creates k pods of a handler, then creates and starts their containers all at once,
// and returns each create+start's duration and container ID (a Deployment's replicas
// starting together after a rotation restart or a drain).
func (s *shimBench) burst(t *testing.T, k, h int) ([]time.Duration, []string) {
	ctx := context.Background()
	handler, image, ann := shimHandlers[h], s.image(h), shimAnnotations(s.id)[h]
	pods, podIDs := make([]*runtimeapi.PodSandboxConfig, k), make([]string, k)
	for i := range k {
		pods[i] = s.n.PodConfig(fmt.Sprintf("%s-burst-%d", handler, i), ann)
		id, err := s.n.RunPod(ctx, pods[i], handler)
		if err != nil {
			t.Fatal(err)
		}
		podIDs[i] = id
	}
	if err := s.n.Pull(ctx, image, pods[0]); err != nil {
		t.Fatal(err)
	}
	ds, cids := make([]time.Duration, k), make([]string, k)
	errs, start := make(chan error, k), make(chan struct{})
	for i := range k {
		go func() {
			<-start
			t0 := time.Now()
			cr, err := s.n.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podIDs[i], Config: shimContainer(image), SandboxConfig: pods[i]})
			if err == nil {
				cids[i] = cr.ContainerId
				_, err = s.n.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId})
			}
			ds[i] = time.Since(t0)
			errs <- err
		}()
	}
	close(start)
	for range k {
		if err := <-errs; err != nil {
			t.Fatalf("%s: burst create+start: %v", handler, err)
		}
	}
	return ds, cids
}

// percentile of durations (nearest rank).
func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

// The shim's per-step times of a create (BREWLET_SLOW_LAUNCH=0s makes it log every create:
// "brewlet: slow launch: <total> in total (threshold 0s): spec-check=… launch=…").
var (
	slowLaunchLine = regexp.MustCompile(`brewlet: slow launch: .*?\(threshold [^)]*\): ([^"]*)".*container=([0-9a-f]+)`)
	stepField      = regexp.MustCompile(`([a-z-]+)=([0-9.]+(?:ns|µs|us|ms|s))`)
)

// shimSteps reads containerd's log and returns, per container ID, the time of each step,
// and the steps in the order a create passes them (as the shim logs them).
func shimSteps(t *testing.T, logPath string) (map[string]map[string]time.Duration, []string) {
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]map[string]time.Duration{}
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		m := slowLaunchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		steps := map[string]time.Duration{}
		for _, f := range stepField.FindAllStringSubmatch(m[1], -1) {
			if d, err := time.ParseDuration(f[2]); err == nil {
				steps[f[1]] = d
				if !slices.Contains(order, f[1]) {
					order = append(order, f[1])
				}
			}
		}
		out[m[2]] = steps
	}
	return out, order
}

// stepColumn is one column of a step table: the containers it summarizes, their CRI
// create+start times, and the quantile shown (0.5 the median, 1 the slowest).
type stepColumn struct {
	title  string
	ids    []string
	totals []time.Duration
	q      float64
}

// stepTable is the table of where brewlet creates' time goes, a column per group of
// creates; the whole of CRI create+start (containerd, runc start included) as its last line.
func stepTable(all map[string]map[string]time.Duration, order []string, cols ...stepColumn) string {
	fmtd := func(ds []time.Duration, q float64) string {
		if len(ds) == 0 {
			return "–"
		}
		return percentile(ds, q).Round(10 * time.Microsecond).String()
	}
	var b strings.Builder
	b.WriteString("\n| brewlet create step |")
	for _, c := range cols {
		b.WriteString(" " + c.title + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for _, st := range order {
		fmt.Fprintf(&b, "| %s |", st)
		for _, c := range cols {
			var ds []time.Duration
			for _, id := range c.ids {
				if s, ok := all[id]; ok {
					ds = append(ds, s[st])
				}
			}
			fmt.Fprintf(&b, " %s |", fmtd(ds, c.q))
		}
		b.WriteString("\n")
	}
	b.WriteString("| CRI create+start in all |")
	for _, c := range cols {
		fmt.Fprintf(&b, " %s |", fmtd(c.totals, c.q))
	}
	b.WriteString("\n")
	return b.String()
}

// burstColumns are the median and slowest of k creates made at once.
func burstColumns(k int, ids []string, totals []time.Duration) []stepColumn {
	return []stepColumn{{fmt.Sprintf("%d at once (median)", k), ids, totals, 0.5}, {fmt.Sprintf("%d at once (slowest)", k), ids, totals, 1}}
}

// shimHandlers are the two handlers the shim bench compares, stock first.
var shimHandlers = [2]string{"runc", vocab.RuntimeClassName}

func shimAnnotations(id string) [2]map[string]string {
	return [2]map[string]string{nil, {vocab.AnnotationRuntimeImage: id}}
}

func (s *shimBench) image(h int) string { return [2]string{s.n.BusyboxImage, s.app}[h] }

// shimContainer runs busybox sleep as the runtime's user, confined as pod admission
// confines every Brewlet pod and as Pod Security "restricted" requires of any pod: the
// RuntimeDefault seccomp filter, no capabilities, no privilege escalation (both handlers
// alike). A stock container without a filter would skip runc's seccomp work that every
// Brewlet container, and every restricted stock pod, pays.
func shimContainer(image string) *runtimeapi.ContainerConfig {
	c := framework.ContainerConfig("c", image, "/bin/busybox", "sleep", "3600")
	c.Linux.SecurityContext = restrictedContext(20001)
	return c
}

// restrictedContext is the security context of a "restricted" container running as uid
// (and gid) id: what every bench gives both handlers. It carries the masked and read-only
// /proc and /sys paths the kubelet sends for every container whose procMount is Default
// (containerd applies only what the CRI request lists; the brewlet shim adds its own
// defaults when they are missing, so without them only the stock container would skip
// those mounts).
func restrictedContext(id int64) *runtimeapi.LinuxContainerSecurityContext {
	return &runtimeapi.LinuxContainerSecurityContext{
		RunAsUser: &runtimeapi.Int64Value{Value: id}, RunAsGroup: &runtimeapi.Int64Value{Value: id},
		Seccomp:       &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		Capabilities:  &runtimeapi.Capability{DropCapabilities: []string{"ALL"}},
		NoNewPrivs:    true,
		MaskedPaths:   kubeletMaskedPaths(),
		ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
	}
}

// kubeletMaskedPaths is the kubelet's default masked-path list on this machine (it adds each
// CPU's thermal_throttle directory that exists).
func kubeletMaskedPaths() []string {
	paths := []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap"}
	for cpu := range runtime.NumCPU() {
		p := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/thermal_throttle", cpu)
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
		}
	}
	return paths
}
