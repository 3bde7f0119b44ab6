package chart

import (
	"regexp"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"brewlet.sh/brewlet/test/kit"
)

// The two rotation-restart policies judge the same barrier; admission policies cannot share
// variables, so brewlet-operator-restarts-barrier repeats part of brewlet-operator-restarts.
// Whatever they both define must read the same, and they must accept the same barrier
// form: otherwise one could let through what the other was written to refuse.
func TestRestartPoliciesAgree(t *testing.T) {
	first, _ := chartPolicyFromConfig(t, "operator-restarts.yaml", kit.ChartRestartsName)
	second, _ := chartPolicyFromConfig(t, "operator-restarts.yaml", kit.ChartRestartsName+"-barrier")
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	varsOf := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) map[string]string {
		out := map[string]string{}
		for _, v := range p.Spec.Variables {
			out[v.Name] = norm(v.Expression)
		}
		return out
	}
	vars, secondVars := varsOf(first), varsOf(second)
	// workload names the object in messages; the first policy also names subresources.
	shared := 0
	for name, got := range secondVars {
		want, ok := vars[name]
		if !ok || name == "workload" {
			continue
		}
		shared++
		if got != want {
			t.Errorf("variable %s differs between the policies:\n  %s: %s\n  %s: %s", name, first.Name, want, second.Name, got)
		}
	}
	if shared < 10 {
		t.Errorf("only %d variables shared: the pod-template chain (oldSpec … barrier, runtimeID) is expected in both", shared)
	}
	if first.Spec.MatchConstraints == nil || second.Spec.MatchConstraints == nil ||
		norm(first.Spec.MatchConditions[0].Expression) != norm(second.Spec.MatchConditions[0].Expression) {
		t.Errorf("the policies match different requests: %+v / %+v", first.Spec.MatchConditions, second.Spec.MatchConditions)
	}
	// The barrier's form: the same pattern and the same tie to the template's runtime.
	form := regexp.MustCompile(`variables\.barrier\.(matches|startsWith)\((.*?)\)( &&|$)`)
	clauses := func(exprs map[string]string) []string {
		var out []string
		for _, name := range []string{"barrierWellFormed", "wellFormedSet"} {
			for _, m := range form.FindAllStringSubmatch(exprs[name], -1) {
				out = append(out, m[1]+" "+m[2])
			}
		}
		return out
	}
	a, b := clauses(vars), clauses(secondVars)
	if len(a) != 2 || strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("barrier form:\n  %s: %q\n  %s: %q", first.Name, a, second.Name, b)
	}
	if !strings.Contains(vars["barrierWellFormed"], "size(variables.barrier) <= 400") ||
		!strings.Contains(secondVars["wellFormedSet"], "size(variables.barrier) <= 400") {
		t.Errorf("barrier size bound missing: %q / %q", vars["barrierWellFormed"], secondVars["wellFormedSet"])
	}
}
