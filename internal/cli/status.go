package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/vocab"
)

// Status is one RuntimeImage's rotation as `brewlet status` reports it: everything comes
// from the RuntimeImage's status (read-only; get and list on runtimeimages suffice).
type Status struct {
	ID         string `json:"id"`
	Epoch      string `json:"epoch"`
	Generation int64  `json:"generation"`
	Digest     string `json:"digest"`
	Approved   string `json:"approved"` // condition status and reason
	Rotation   string `json:"rotation"` // RotationProgressing reason
	// RotationMessage is RotationProgressing's message while the rotation is not done: it
	// names what holds it (installing or failed nodes, nodes without a running agent).
	RotationMessage string                       `json:"rotationMessage,omitempty"`
	Nodes           brewletv1.RotationNodeCounts `json:"nodes"`
	Excluded        []brewletv1.ExcludedNode     `json:"excludedNodes,omitempty"`
	Workloads       map[string]int               `json:"workloads"` // restarts by outcome
	Restarts        []brewletv1.WorkloadRestart  `json:"restarts,omitempty"`
	// RestartsHalted: more restarts of this target failed than the budget (none start).
	RestartsHalted *brewletv1.RestartsHalt `json:"restartsHalted,omitempty"`
	// FailedStarts: containers the nodes saw fail to start on the target generation.
	FailedStarts *brewletv1.FailedStarts `json:"failedStarts,omitempty"`
	// RolledBack is the RolledBack condition's message while the current generation is a
	// rollback, or says why a due rollback could not happen.
	RolledBack    string         `json:"rolledBack,omitempty"`
	OldContainers []OldContainer `json:"oldContainers,omitempty"`
	OmittedNodes  int32          `json:"omittedNodes,omitempty"`
}

// OldContainer is one container still on an older generation or epoch.
type OldContainer struct {
	Node       string `json:"node"`
	Current    bool   `json:"current"` // false: the node's report is stale (last one shown)
	Namespace  string `json:"namespace"`
	Pod        string `json:"pod"`
	Container  string `json:"container"`
	Epoch      string `json:"epoch"`
	Generation int64  `json:"generation"`
}

// StatusOf summarizes a RuntimeImage.
func StatusOf(ri *brewletv1.RuntimeImage) Status {
	st := ri.Status
	s := Status{ID: ri.Name, Epoch: string(st.Epoch), Generation: st.Generation, Digest: st.Digest,
		Workloads: map[string]int{}, OmittedNodes: st.OmittedNodes}
	if c := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionApproved)); c != nil {
		s.Approved = string(c.Status) + " (" + c.Reason + ")"
	}
	if c := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionRotationProgressing)); c != nil {
		s.Rotation = c.Reason
		if c.Reason != string(vocab.ReasonAllNodesCurrent) {
			s.RotationMessage = c.Message
		}
	}
	if c := meta.FindStatusCondition(st.Conditions, string(vocab.ConditionRolledBack)); c != nil {
		s.RolledBack = c.Reason + ": " + c.Message
	}
	if r := st.Rotation; r != nil {
		s.Nodes, s.Excluded, s.Restarts, s.RestartsHalted = r.Nodes, r.ExcludedNodes, r.Restarts, r.RestartsHalted
		s.FailedStarts = r.FailedStarts
		if c := r.RestartCounts; c != nil {
			// Exact counts: the records list at most 100 workloads.
			for o, n := range map[string]int32{"Pending": c.Pending, "InProgress": c.InProgress, "Succeeded": c.Succeeded,
				"Failed": c.Failed, "Deferred": c.Deferred, "NotApplicable": c.NotApplicable} {
				if n > 0 {
					s.Workloads[o] = int(n)
				}
			}
		} else {
			for _, w := range r.Restarts {
				s.Workloads[w.Outcome]++
			}
		}
	}
	for _, o := range st.TaskObservations {
		for _, b := range o.Bindings {
			s.OldContainers = append(s.OldContainers, OldContainer{Node: o.NodeName, Current: o.Current, Namespace: b.PodNamespace,
				Pod: b.PodName, Container: b.ContainerName, Epoch: string(b.Epoch), Generation: b.Generation})
		}
	}
	return s
}

// bar draws current nodes out of all assigned ones.
func bar(done, total int32, width int) string {
	if total <= 0 {
		return "[" + strings.Repeat("·", width) + "]"
	}
	n := int(int64(done) * int64(width) / int64(total))
	return "[" + strings.Repeat("█", n) + strings.Repeat("░", width-n) + "]"
}

// WriteTable renders statuses for people.
func WriteTable(w io.Writer, all []Status) error {
	for i, s := range all {
		if i > 0 {
			fmt.Fprintln(w)
		}
		digest := s.Digest
		if len(digest) > 19 {
			digest = digest[:19] + "…"
		}
		fmt.Fprintf(w, "%s  generation %d (%s)  approved %s\n", s.ID, s.Generation, digest, s.Approved)
		if s.RolledBack != "" {
			fmt.Fprintf(w, "  ROLLED BACK %s\n", s.RolledBack)
		}
		n := s.Nodes
		total := n.Current + n.Installing + n.Failed + n.Stuck
		fmt.Fprintf(w, "  nodes      %s %d/%d current · %d installing · %d failed · %d stuck · %d excluded  (%s)\n",
			bar(n.Current, total, 20), n.Current, total, n.Installing, n.Failed, n.Stuck, n.Excluded, s.Rotation)
		if s.RotationMessage != "" {
			fmt.Fprintf(w, "             %s\n", s.RotationMessage)
		}
		for _, e := range s.Excluded {
			fmt.Fprintf(w, "             excluded %s: %s (generation %d)\n", e.Name, e.Reason, e.Generation)
		}
		if f := s.FailedStarts; f != nil {
			label := "failed starts"
			if f.Exceeded {
				label = "FAILED STARTS"
			}
			fmt.Fprintf(w, "  %s  %s\n", label, f.Message)
		}
		if len(s.Workloads) > 0 {
			var parts []string
			for _, o := range []string{"Succeeded", "InProgress", "Pending", "Deferred", "Failed", "NotApplicable"} {
				if s.Workloads[o] > 0 {
					parts = append(parts, fmt.Sprintf("%d %s", s.Workloads[o], o))
				}
			}
			fmt.Fprintf(w, "  workloads  %s\n", strings.Join(parts, " · "))
			if h := s.RestartsHalted; h != nil {
				fmt.Fprintf(w, "             RESTARTS HALTED: %s\n", h.Message)
			}
			listed := 0
			for _, r := range s.Restarts {
				if r.Outcome != "Succeeded" {
					listed++
					fmt.Fprintf(w, "             %s %s/%s %s: %s\n", r.Kind, r.Namespace, r.Name, r.Outcome, r.Message)
				}
			}
			if total := sum(s.Workloads) - s.Workloads["Succeeded"]; total > listed {
				fmt.Fprintf(w, "             and %d more not listed (the status keeps %d records)\n", total-listed, len(s.Restarts))
			}
		}
		if len(s.OldContainers) == 0 {
			fmt.Fprintf(w, "  old containers: none\n")
			continue
		}
		fmt.Fprintf(w, "  old containers (%d):\n", len(s.OldContainers))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    NODE\tREPORT\tNAMESPACE\tPOD\tCONTAINER\tGENERATION")
		for _, c := range s.OldContainers {
			report := "current"
			if !c.Current {
				report = "stale"
			}
			gen := fmt.Sprint(c.Generation)
			if c.Epoch != s.Epoch {
				gen += " (previous epoch)"
			}
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\t%s\n", c.Node, report, c.Namespace, c.Pod, c.Container, gen)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if s.OmittedNodes > 0 {
			fmt.Fprintf(w, "    … and %d more node(s)\n", s.OmittedNodes)
		}
	}
	return nil
}

type statusOptions struct {
	kubeconfig string
	context    string
	output     string
	watch      bool
	interval   time.Duration
}

func newStatusCmd() *cobra.Command {
	o := &statusOptions{}
	c := &cobra.Command{
		Use:   "status [ID]",
		Short: "Where is my rotation: nodes, restarted workloads and containers still on older generations, per RuntimeImage",
		Long: "Reads RuntimeImages (get and list suffice) and prints, for one ID or all, the target generation, " +
			"nodes current/installing/failed/excluded, workload restarts by outcome and the containers still on older " +
			"generations. Also usable as the kubectl plugin `kubectl brewlet status` (install this binary as kubectl-brewlet).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.output != "table" && o.output != "json" && o.output != "yaml" {
				return usageError{fmt.Errorf("-o %q: want table, json or yaml", o.output)}
			}
			if o.interval < time.Second {
				return usageError{fmt.Errorf("--interval %s: at least 1s", o.interval)}
			}
			cl, err := statusClient(o.kubeconfig, o.context)
			if err != nil {
				return err
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			for {
				err := printStatus(cmd.Context(), cl, id, o.output, cmd.OutOrStdout())
				if !o.watch {
					return err
				}
				if err != nil { // watching: a passing API error is shown, not the end
					fmt.Fprintf(cmd.ErrOrStderr(), "%v (retrying)\n", err)
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(o.interval):
					fmt.Fprintf(cmd.OutOrStdout(), "\n--- %s\n", time.Now().Format(time.TimeOnly))
				}
			}
		},
	}
	f := c.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	f.StringVar(&o.context, "context", "", "the kubeconfig context to use (default: its current context)")
	f.StringVarP(&o.output, "output", "o", "table", "table, json or yaml")
	f.BoolVarP(&o.watch, "watch", "w", false, "print again every --interval until interrupted")
	f.DurationVar(&o.interval, "interval", 2*time.Second, "pause between prints with --watch")
	return c
}

// statusConfig resolves the cluster to ask as kubectl does: --kubeconfig, else $KUBECONFIG,
// else ~/.kube/config, else in-cluster; --context picks a context other than the current one.
func statusConfig(kubeconfig, kubeContext string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster to ask: %w (set --kubeconfig or KUBECONFIG, and --context)", err)
	}
	return cfg, nil
}

func statusClient(kubeconfig, kubeContext string) (client.Client, error) {
	cfg, err := statusConfig(kubeconfig, kubeContext)
	if err != nil {
		return nil, err
	}
	s := runtime.NewScheme()
	if err := brewletv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: s})
}

func printStatus(ctx context.Context, cl client.Client, id, output string, w io.Writer) error {
	var ris []brewletv1.RuntimeImage
	if id != "" {
		ri := &brewletv1.RuntimeImage{}
		if err := cl.Get(ctx, client.ObjectKey{Name: id}, ri); err != nil {
			return fmt.Errorf("RuntimeImage %s: %w", id, err)
		}
		ris = append(ris, *ri)
	} else {
		var list brewletv1.RuntimeImageList
		if err := cl.List(ctx, &list); err != nil {
			return fmt.Errorf("list RuntimeImages: %w", err)
		}
		ris = list.Items
		sort.Slice(ris, func(i, j int) bool { return ris[i].Name < ris[j].Name })
	}
	all := make([]Status, 0, len(ris))
	for i := range ris {
		all = append(all, StatusOf(&ris[i]))
	}
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	case "yaml":
		b, err := yaml.Marshal(all)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	if len(all) == 0 {
		_, err := fmt.Fprintln(w, "no RuntimeImages")
		return err
	}
	return WriteTable(w, all)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
