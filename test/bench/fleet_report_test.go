//go:build bench

package bench

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"brewlet.sh/brewlet/internal/operator/restarts"
	"brewlet.sh/brewlet/test/kit"
)

// report prints the table (lines starting with "|", which `make bench` keeps).
func (b *fleetBench) report(single []time.Duration, before, after fleetSnap, tl fleetTimeline) {
	t := b.t
	api := func(res, sub string, kv ...string) float64 {
		return after.api.total(res, sub, kv...) - before.api.total(res, sub, kv...)
	}
	op := func(kv ...string) float64 { return after.op.total("", "", kv...) - before.op.total("", "", kv...) }
	// The operator never deletes NodeRuntimes: the test and the garbage collector do.
	riStatus, nrtSpec, npStatus := api("runtimeimages", "status"), api("noderuntimes", "")-api("noderuntimes", "", "verb", "DELETE"), api("nodeprofiles", "status")
	depPatch := api("deployments", "", "verb", "PATCH")
	conflicts := api("runtimeimages", "status", "code", "409") + api("noderuntimes", "", "code", "409") + api("nodeprofiles", "status", "code", "409")
	evs := &eventsv1.EventList{}
	kit.Must(t, b.c.List(context.Background(), evs))
	opEvents := 0
	for _, e := range evs.Items {
		if e.ReportingController == "brewlet-operator" && !e.CreationTimestamp.Before(&metav1.Time{Time: tl.start.Truncate(time.Second)}) {
			opEvents++
		}
	}
	b.deps.mu.Lock()
	patched, rolled := slices.SortedFunc(maps.Values(b.deps.patched), time.Time.Compare), slices.SortedFunc(maps.Values(b.deps.rolled), time.Time.Compare)
	var rollouts []time.Duration
	for n, p := range b.deps.patched {
		if r, ok := b.deps.rolled[n]; ok {
			rollouts = append(rollouts, r.Sub(p))
		}
	}
	maxInFlight := b.deps.maxInFlight
	b.deps.mu.Unlock()
	// With 5 slots, patch i waits for rollout i-5 to finish: the gap is the operator's turn.
	var handoffs []time.Duration
	for i := fleetMaxConcurrent; i < len(patched) && i-fleetMaxConcurrent < len(rolled); i++ {
		handoffs = append(handoffs, patched[i].Sub(rolled[i-fleetMaxConcurrent]))
	}
	slices.Sort(rollouts)
	slices.Sort(handoffs)
	restarted, first, last := len(rolled), tl.complete, tl.complete
	if len(rolled) > 0 {
		first, last = patched[0], rolled[len(rolled)-1]
	}
	since := func(at time.Time) string { return at.Sub(tl.start).Round(100 * time.Millisecond).String() }
	excludedNote := fmt.Sprintf("excluded: %d failing node(s), %d stuck (AgentNotReporting); %d Deployment(s) deferred (their pod is on a failing node)",
		tl.excluded.Failed, tl.excluded.Stuck, tl.outcomes[restarts.OutcomeDeferred])
	slots := math.Ceil(float64(restarted) / fleetMaxConcurrent)
	one, phase := single[len(single)/2], last.Sub(tl.complete)
	ideal := time.Duration(slots) * one
	agentWrites := float64(after.status - before.status)
	opWrites := riStatus + nrtSpec + npStatus + depPatch + float64(opEvents)
	reconciles := map[string]float64{}
	for _, c := range []string{"runtimeimage", "nodeprofile", "rotationrestarts"} {
		reconciles[c] = op("controller", c, "metric", "controller_runtime_reconcile_total")
	}
	passTime := func(c string) string {
		sum, n := op("controller", c, "metric", "controller_runtime_reconcile_time_seconds_sum"), op("controller", c, "metric", "controller_runtime_reconcile_time_seconds_count")
		return time.Duration(sum / n * float64(time.Second)).Round(time.Millisecond).String()
	}
	pct := func(d []time.Duration, p int) string {
		if len(d) == 0 {
			return "—"
		}
		return d[min(len(d)-1, len(d)*p/100)].Round(10 * time.Millisecond).String()
	}
	var s strings.Builder
	fmt.Fprintf(&s, "\n| fleet rotation: %d kwok nodes (%d failing, %d agents killed mid-rotation), %d opted-in Deployments; maxUnavailable %s, maxFailures %d, maxConcurrent %d; "+
		"restart progress deadline %s; node-stale-after %s; minReadySeconds %s; Lease renewal %s | value | note |\n|---|---|---|\n",
		b.cfg.nodes, b.cfg.failing, b.cfg.stale, b.cfg.workloads, fleetMaxUnavail, fleetMaxFailures, fleetMaxConcurrent, b.cfg.deadline, fleetStaleAfter, b.cfg.minReady, b.cfg.renew)
	row := func(k, note, format string, v ...any) {
		fmt.Fprintf(&s, "| %s | %s | %s |\n", k, fmt.Sprintf(format, v...), note)
	}
	row("generation 2 assigned", "from the digest edit (all times below too)", "%s", since(tl.gen))
	row("every healthy node serves generation 2", fmt.Sprintf("%d nodes, installs of 1–5 s", b.cfg.nodes-b.cfg.failing-b.cfg.stale), "%s", since(tl.nodes))
	if !tl.lastKill.IsZero() {
		row("last agent killed", fmt.Sprintf("%d agents stop renewing their Lease and reporting as their wave lets them install", b.cfg.stale), "%s", since(tl.lastKill))
	}
	row("nodes installing at once (max)", fmt.Sprintf("maxUnavailable %s of %d", fleetMaxUnavail, b.cfg.nodes), "%d", b.agents.maxInstalling.Load())
	row("installs on allowedGeneration 0", "0 reads as \"current\": outside any wave (must be 0)", "%d", b.agents.unstaged.Load())
	row("RotationComplete", excludedNote, "%s", since(tl.complete))
	row("first barrier patch", "after RotationComplete", "%s", first.Sub(tl.complete).Round(100*time.Millisecond))
	row("every opted-in Deployment restarted and rolled out", fmt.Sprintf("%d restarted (%d for a pod on a stuck node); restart phase %s; every pod on generation 2 at %s",
		restarted, tl.onStale, phase.Round(time.Second), since(tl.done)), "%s", since(last))
	row("kwok nodes NotReady / running pods not Ready (max)", "the machine's load: kwok misses heartbeats, never re-readies pods", "%d / %d", tl.maxNotReady, tl.maxUnready)
	row("restarts in progress at once (max)", fmt.Sprintf("on the Deployments; %d in status records", tl.maxRecordsInProgress), "%d", maxInFlight)
	row("one rollout alone (median of 3)", fmt.Sprintf("probe, template change: %v", single), "%s", one.Round(10*time.Millisecond))
	row("a restart's rollout in the run (median / p90)", "barrier seen to rolled out", "%s / %s", pct(rollouts, 50), pct(rollouts, 90))
	row("slot handoff (median / p90)", "a rollout done to the next barrier patch", "%s / %s", pct(handoffs, 50), pct(handoffs, 90))
	row("ideal: ceil(restarted/5) × one rollout", fmt.Sprintf("%.0f slots", slots), "%s", ideal.Round(time.Second))
	row("restart phase / ideal", "issue 11 asks ≤ 1.2×", "%.2f×", phase.Seconds()/ideal.Seconds())
	if len(rollouts) > 0 {
		row("restart phase / (ceil(W/5) × median rollout in the run)", "the same, rollouts slowed by the load left out", "%.2f×", phase.Seconds()/(slots*rollouts[len(rollouts)/2].Seconds()))
	}
	row("operator writes: RuntimeImage status", "RuntimeImage and restart controllers", "%.0f", riStatus)
	row("operator writes: NodeRuntime spec", fmt.Sprintf("%d nodes", b.cfg.nodes), "%.0f", nrtSpec)
	row("operator writes: NodeProfile status", "", "%.0f", npStatus)
	row("operator writes: Deployment patches", "only the operator patches Deployments", "%.0f", depPatch)
	row("operator writes: Events", "events.k8s.io objects it reported", "%d", opEvents)
	row("operator write conflicts (409)", "included above", "%.0f", conflicts)
	row("changes: agent status writes + restarted workloads", "what the operator reacts to", "%.0f + %d", agentWrites, restarted)
	row("operator writes per change", fmt.Sprintf("%.0f writes; O(nodes × passes) would be %d × %.0f", opWrites, b.cfg.nodes, reconciles["runtimeimage"]+reconciles["nodeprofile"]+reconciles["rotationrestarts"]),
		"%.2f", opWrites/(agentWrites+float64(restarted)))
	row("operator passes: runtimeimage / nodeprofile / rotationrestarts", fmt.Sprintf("mean pass %s / %s / %s", passTime("runtimeimage"), passTime("nodeprofile"), passTime("rotationrestarts")),
		"%.0f / %.0f / %.0f", reconciles["runtimeimage"], reconciles["nodeprofile"], reconciles["rotationrestarts"])
	row("operator memory: VmHWM / max VmRSS in the rotation", "", "%d / %d MiB", procKiB(b.pid, "VmHWM")/1024, tl.maxRSS/1024)
	row("operator CPU", fmt.Sprintf("over %s", after.at.Sub(before.at).Round(time.Second)), "%s", (after.cpu - before.cpu).Round(100*time.Millisecond))
	row("RuntimeImage JSON: end / max", fmt.Sprintf("restart counts in status: %v", tl.outcomes), "%d / %d bytes", tl.endSize, tl.maxSize)
	row("load generator writes: Lease / status", fmt.Sprintf("%d errors", b.agents.errs.Load()), "%d / %d", after.leases-before.leases, after.status-before.status)
	t.Log(s.String())
	fmt.Print(s.String())
	t.Logf("API server writes during the rotation, every client (verb group/resource/subresource code):\n%s", after.api.writes(before.api))
	if v := b.agents.lastErr.Load(); v != nil {
		t.Logf("load generator: %d errors, last: %v", b.agents.errs.Load(), v)
	}
}
