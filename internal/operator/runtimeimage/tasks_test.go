package runtimeimage

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// allFresh: every node's agent is alive.
func allFresh(string) bool { return true }

func noneSilent(string) bool { return false }

func task(pod string, epoch types.UID, gen int64) brewletv1.NodeTask {
	return brewletv1.NodeTask{PodNamespace: "default", PodName: pod, PodUID: types.UID("uid-" + pod), ContainerName: "app",
		ID: "python-3.12", Epoch: epoch, Generation: gen}
}

func tasksOn(node string, complete bool, tasks ...brewletv1.NodeTask) brewletv1.NodeRuntime {
	n := report(node, at(2, vocab.StateReady, ""))
	n.Status.NodeUID = types.UID("node-uid-" + node)
	n.Status.Complete = complete
	n.Status.ObservedAt = &t0
	n.Status.Tasks = tasks
	return n
}

func TestTaskObservations(t *testing.T) {
	other := task("other-runtime", uid, 1)
	other.ID = "node-22"
	for _, tc := range []struct {
		name    string
		reports []brewletv1.NodeRuntime
		fresh   func(string) bool
		want    string // node:current:pod@gen,... per observation, ";"-joined
		cond    string // status/reason
		msg     string
	}{
		{name: "no containers", cond: "False/NoOldGenerationTasks", msg: "every reported container of python-3.12 runs generation 2"},
		{name: "only current containers and other runtimes", reports: []brewletv1.NodeRuntime{tasksOn("a", true, task("p1", uid, 2), other)},
			cond: "False/NoOldGenerationTasks"},
		{name: "old generation and previous epoch, sorted by node and pod", reports: []brewletv1.NodeRuntime{
			tasksOn("b", true, task("p3", uid, 1)),
			tasksOn("a", true, task("p2", uid, 1), task("p1", "old-epoch", 7), task("p0", uid, 2))},
			want: "a:true:p1@7,p2@1;b:true:p3@1", cond: "True/OldGenerationTasks",
			msg: "3 containers (2 on generation 1, 1 of a previous epoch) on 2 nodes; restart them"},
		{name: "a silent node keeps its last bindings, not current", fresh: func(n string) bool { return n != "b" },
			reports: []brewletv1.NodeRuntime{tasksOn("a", true, task("p1", uid, 1)), tasksOn("b", true, task("p2", uid, 1))},
			want:    "a:true:p1@1;b:false:p2@1", cond: "True/OldGenerationTasks", msg: "2 containers (2 on generation 1) on 2 nodes; 1 node not reporting"},
		{name: "an incomplete report is not current", reports: []brewletv1.NodeRuntime{tasksOn("a", false, task("p1", uid, 1))},
			want: "a:false:p1@1", cond: "True/OldGenerationTasks", msg: "1 container (1 on generation 1) on 1 node; 1 node not reporting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := tc.fresh
			if fresh == nil {
				fresh = allFresh
			}
			r := ri(finalized, image(repo+dB), status(uid, 2, dB))
			d := Decide(r, tc.reports, 1, fresh, noneSilent, "", Verdicts{}, t1)
			var got []string
			for _, o := range d.Status.TaskObservations {
				var bs []string
				for _, b := range o.Bindings {
					bs = append(bs, fmt.Sprintf("%s@%d", b.PodName, b.Generation))
				}
				if o.NodeUID != types.UID("node-uid-"+o.NodeName) || !o.ObservedAt.Equal(&t0) {
					t.Errorf("observation %s: uid %s observedAt %v", o.NodeName, o.NodeUID, o.ObservedAt)
				}
				got = append(got, fmt.Sprintf("%s:%t:%s", o.NodeName, o.Current, strings.Join(bs, ",")))
			}
			if g := strings.Join(got, ";"); g != tc.want {
				t.Errorf("observations %q, want %q", g, tc.want)
			}
			c := meta.FindStatusCondition(d.Status.Conditions, string(vocab.ConditionOldGenerationTasks))
			if c == nil || c.Status+"/"+metav1.ConditionStatus(c.Reason) != metav1.ConditionStatus(tc.cond) {
				t.Fatalf("condition %+v, want %s", c, tc.cond)
			}
			if !strings.Contains(c.Message, tc.msg) {
				t.Errorf("message %q lacks %q", c.Message, tc.msg)
			}
			// Deciding again from the decided status changes nothing (no rewrite per pass).
			again := r.DeepCopy()
			again.Status = d.Status
			if d2 := Decide(again, tc.reports, 1, fresh, noneSilent, "", Verdicts{}, metav1.NewTime(t1.Add(time.Hour))); !equality.Semantic.DeepEqual(d2.Status, d.Status) {
				t.Errorf("a second pass changed the status:\n%+v\n%+v", d.Status, d2.Status)
			}
		})
	}
}

// Thousands of nodes with hundreds of old containers each stay within the bounds, and what
// is left out is counted.
func TestTaskObservationsBounded(t *testing.T) {
	var reports []brewletv1.NodeRuntime
	for n := 0; n < MaxObservedNodes+7; n++ {
		var ts []brewletv1.NodeTask
		for p := 0; p < MaxBindingsPerNode+3; p++ {
			ts = append(ts, task(fmt.Sprintf("p%03d", p), uid, 1))
		}
		reports = append(reports, tasksOn(fmt.Sprintf("node-%04d", n), true, ts...))
	}
	d := Decide(ri(finalized, image(repo+dB), status(uid, 2, dB)), reports, 1, allFresh, noneSilent, "", Verdicts{}, t1)
	st := d.Status
	if len(st.TaskObservations) != MaxObservedNodes || st.OmittedNodes != 7 {
		t.Fatalf("%d observations, %d omitted nodes", len(st.TaskObservations), st.OmittedNodes)
	}
	for _, o := range st.TaskObservations {
		if len(o.Bindings) != MaxBindingsPerNode || o.Omitted != 3 {
			t.Fatalf("node %s: %d bindings, %d omitted", o.NodeName, len(o.Bindings), o.Omitted)
		}
	}
	c := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionOldGenerationTasks))
	want := fmt.Sprintf("%d containers (%d on generation 1) on %d nodes", (MaxObservedNodes+7)*(MaxBindingsPerNode+3), (MaxObservedNodes+7)*(MaxBindingsPerNode+3), MaxObservedNodes+7)
	if c == nil || !strings.HasPrefix(c.Message, want) {
		t.Errorf("message %+v, want prefix %q", c, want)
	}
}

// A node's report is hostile input: a report without observedAt, or containers with names
// Kubernetes would never give, affect that node's own entry only, and the status stays
// writable (every observation has its required fields, every string is bounded).
func TestTaskObservationsFromHostileReports(t *testing.T) {
	ri := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "python-3.12", UID: uid}}
	noTime := tasksOn("b", true, task("p2", uid, 1))
	noTime.Status.ObservedAt = nil
	long := task(strings.Repeat("x", 300), uid, 1)
	badNS := task("p4", uid, 1)
	badNS.PodNamespace = "Not A Namespace"
	noUID := task("p5", uid, 1)
	noUID.PodUID = ""
	bigUID := tasksOn("d", true, task("p6", uid, 1))
	bigUID.Status.NodeUID = types.UID(strings.Repeat("u", 1000))
	st := &brewletv1.RuntimeImageStatus{Epoch: uid, Generation: 2}
	observeTasks(ri, st, []brewletv1.NodeRuntime{tasksOn("a", true, task("p1", uid, 1)), noTime,
		tasksOn("c", true, task("p3", uid, 1), long, badNS, noUID), bigUID}, allFresh, metav1.NewTime(t0.Add(time.Minute)))
	var got []string
	for _, o := range st.TaskObservations {
		got = append(got, fmt.Sprintf("%s:%d:%d", o.NodeName, len(o.Bindings), o.Omitted))
	}
	if strings.Join(got, ";") != "a:1:0;c:1:3" {
		t.Fatalf("observations %v; want a with 1, c with 1 and 3 left out, b and d not listed", got)
	}
	c := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionOldGenerationTasks))
	if c == nil || !strings.Contains(c.Message, "2 containers") || !strings.Contains(c.Message, "2 nodes sent a report that cannot be used") {
		t.Fatalf("condition %+v", c)
	}
}

func FuzzObserveTasks(f *testing.F) {
	f.Add("default", "pod", "app", "uid-1", "node-uid", int64(1), true, int64(1_800_000_000))
	f.Add("", strings.Repeat("p", 300), "App", "", strings.Repeat("u", 200), int64(-5), false, int64(0))
	f.Fuzz(func(t *testing.T, ns, pod, container, podUID, nodeUID string, gen int64, hasTime bool, when int64) {
		ri := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: "python-3.12", UID: uid}}
		r := tasksOn("n", true, brewletv1.NodeTask{PodNamespace: ns, PodName: pod, PodUID: types.UID(podUID), ContainerName: container,
			ID: "python-3.12", Epoch: uid, Generation: gen})
		r.Status.NodeUID = types.UID(nodeUID)
		r.Status.ObservedAt = nil
		if hasTime {
			ts := metav1.NewTime(time.Unix(when, 0))
			r.Status.ObservedAt = &ts
		}
		st := &brewletv1.RuntimeImageStatus{Epoch: uid, Generation: 1_000}
		observeTasks(ri, st, []brewletv1.NodeRuntime{r}, allFresh, t0)
		for _, o := range st.TaskObservations {
			if o.ObservedAt.IsZero() || len(o.NodeUID) > maxUIDLength {
				t.Fatalf("unwritable observation %+v", o)
			}
			for _, b := range o.Bindings {
				if len(b.PodName) > 253 || len(b.PodNamespace) > 63 || len(b.ContainerName) > 63 || len(b.PodUID) > maxUIDLength {
					t.Fatalf("unbounded binding %+v", b)
				}
			}
		}
	})
}
