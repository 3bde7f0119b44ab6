package chart

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The monitoring objects are opt-in, need metrics.enabled, and carry the chart's rule file
// and dashboard unchanged; the binding names only the service account given.
func TestChartMonitoring(t *testing.T) {
	framework.Tool(t, "helm")
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "metrics.enabled=true")...)
	for _, o := range []struct{ kind, name string }{{"ServiceMonitor", "brewlet-operator"}, {"ServiceMonitor", "brewlet-provisioner"},
		{"PrometheusRule", "brewlet"}, {"ConfigMap", "brewlet-dashboard"}, {"ClusterRoleBinding", "brewlet-metrics-reader"}} {
		if rc.Has(o.kind, o.name) {
			t.Errorf("%s %s rendered without being asked for", o.kind, o.name)
		}
	}
	for _, off := range []string{"metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true", "metrics.dashboard.enabled=true"} {
		_, out, err := kit.ChartTemplate(t, kit.ChartNS, chartPools("--set", off)...)
		if err == nil || !strings.Contains(out, "need metrics.enabled: true") {
			t.Errorf("%s without metrics.enabled: err %v, want it refused\n%s", off, err, out)
		}
	}
	rc = kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "metrics.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
		"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.dashboard.enabled=true",
		"--set", "metrics.serviceMonitor.prometheusServiceAccount.name=prom", "--set", "metrics.serviceMonitor.prometheusServiceAccount.namespace=monitoring",
		"--set", "metrics.prometheusRule.labels.release=kp")...)
	for _, name := range []string{"brewlet-operator", "brewlet-provisioner"} {
		sm := rc.Find("ServiceMonitor", name)
		if sm == nil {
			t.Fatalf("ServiceMonitor %s not rendered", name)
		}
		var obj struct {
			Spec struct {
				Endpoints []map[string]any
			}
		}
		kit.Must(t, json.Unmarshal(sm.JSON, &obj))
		if len(obj.Spec.Endpoints) != 1 || obj.Spec.Endpoints[0]["scheme"] != "https" || obj.Spec.Endpoints[0]["port"] != "metrics" {
			t.Errorf("ServiceMonitor %s endpoints %v: want one, https, port metrics", name, obj.Spec.Endpoints)
		}
	}
	rule := rc.Find("PrometheusRule", "brewlet")
	if rule == nil {
		t.Fatal("PrometheusRule not rendered")
	}
	var pr struct {
		Metadata struct{ Labels map[string]string }
		Spec     map[string]any
	}
	kit.Must(t, json.Unmarshal(rule.JSON, &pr))
	var file map[string]any
	kit.Must(t, yaml.Unmarshal([]byte(read(t, filepath.Join(kit.ChartDir(t), "files", "prometheus-rules.yaml"))), &file))
	a, _ := json.Marshal(pr.Spec)
	b, _ := json.Marshal(file)
	if string(a) != string(b) {
		t.Errorf("the PrometheusRule's spec differs from charts/brewlet/files/prometheus-rules.yaml")
	}
	if pr.Metadata.Labels["release"] != "kp" {
		t.Errorf("PrometheusRule labels %v: want metrics.prometheusRule.labels", pr.Metadata.Labels)
	}
	cm := rc.Find("ConfigMap", "brewlet-dashboard")
	if cm == nil {
		t.Fatal("dashboard ConfigMap not rendered")
	}
	var c struct {
		Metadata struct{ Labels map[string]string }
		Data     map[string]string
	}
	kit.Must(t, json.Unmarshal(cm.JSON, &c))
	if c.Data["brewlet.json"] != read(t, filepath.Join(kit.ChartDir(t), "files", "dashboard.json")) {
		t.Error("the dashboard ConfigMap's data differs from charts/brewlet/files/dashboard.json")
	}
	if c.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v: want metrics.dashboard.labels", c.Metadata.Labels)
	}
	crb := rc.Find("ClusterRoleBinding", "brewlet-metrics-reader")
	if crb == nil || !strings.Contains(string(crb.JSON), `"name":"prom","namespace":"monitoring"`) {
		t.Errorf("metrics reader binding: %s", crb)
	}
}
