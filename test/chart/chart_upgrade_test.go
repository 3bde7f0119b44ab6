package chart

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// What keeps an upgrade gentle: the operator (pod admission) starts a new replica before
// stopping an old one and keeps one through drains; the agents restart maxUnavailable
// nodes at a time.
func TestChartUpgradeSettings(t *testing.T) {
	framework.Tool(t, "helm")
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools()...)
	dep, ds := chartCheckCommon(t, rc, kit.ChartNS)
	if s := dep.Spec.Strategy; s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil ||
		s.RollingUpdate.MaxUnavailable.String() != "0" || s.RollingUpdate.MaxSurge.String() != "1" {
		t.Errorf("operator strategy %+v: want a rolling update that surges one and stops none first", s)
	}
	if u := ds.Spec.UpdateStrategy.RollingUpdate; u == nil || u.MaxUnavailable.String() != "1" {
		t.Errorf("agent update strategy %+v: want maxUnavailable 1 by default", ds.Spec.UpdateStrategy)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	rc.Decode(t, "PodDisruptionBudget", "brewlet-operator", pdb)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != "1" ||
		pdb.Spec.Selector == nil || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "brewlet-operator" {
		t.Errorf("operator PodDisruptionBudget %+v: want minAvailable 1 over the operator's pods", pdb.Spec)
	}

	for v, flag := range map[string]string{"10%": "--set-string", "3": "--set"} {
		rc := kit.ChartMustRender(t, kit.ChartNS, chartPools(flag, "provisioner.updateStrategy.maxUnavailable="+v)...)
		_, ds := chartCheckCommon(t, rc, kit.ChartNS)
		if got := ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String(); got != v {
			t.Errorf("maxUnavailable %s rendered as %s", v, got)
		}
	}
	for _, bad := range []string{"0%", "150%", "all"} {
		if _, out, err := kit.ChartTemplate(t, kit.ChartNS, chartPools("--set-string", "provisioner.updateStrategy.maxUnavailable="+bad)...); err == nil {
			t.Errorf("maxUnavailable %q accepted\n%s", bad, out)
		}
	}
	if _, out, err := kit.ChartTemplate(t, kit.ChartNS, chartPools("--set", "provisioner.updateStrategy.maxUnavailable=0")...); err == nil {
		t.Errorf("maxUnavailable 0 accepted (the agents could never be upgraded)\n%s", out)
	}

	// One replica: no budget that would block every drain of its node.
	rc = kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "operator.replicas=1")...)
	if rc.Has("PodDisruptionBudget", "brewlet-operator") {
		t.Error("a PodDisruptionBudget with one replica would block drains")
	}
	if !strings.Contains(string(rc.Find("Deployment", "brewlet-operator").JSON), `"maxSurge":1`) {
		t.Error("one replica: the upgrade must still surge a new one first")
	}
}
