package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"brewlet.sh/brewlet/test/firsthour"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// The monitoring the chart ships, run for real: the Prometheus Operator's CRDs installed (the
// API server checks the chart's ServiceMonitors and PrometheusRule against them), the
// chart's objects read back from the cluster and handed to a real Prometheus as the
// operator would (scrape configs from the ServiceMonitors, rule file from the
// PrometheusRule), scraping through the components' authenticated endpoints with the token
// of the service account the chart bound to brewlet-metrics-reader.

const (
	promNamespace = "monitoring"
	promAccount   = "prometheus"
)

// monitoringValues turn on everything the chart offers for Prometheus and Grafana; a short
// scrape interval so the test sees changes within seconds.
func monitoringValues() map[string]any {
	return map[string]any{"metrics": map[string]any{
		"enabled": true,
		"serviceMonitor": map[string]any{"enabled": true, "interval": "5s",
			"prometheusServiceAccount": map[string]any{"name": promAccount, "namespace": promNamespace}},
		"prometheusRule": map[string]any{"enabled": true},
		"dashboard":      map[string]any{"enabled": true},
	}}
}

// installMonitoringCRDs creates the ServiceMonitor and PrometheusRule CRDs (tool
// monitoring-crds) and the namespace and service account Prometheus runs as.
func installMonitoringCRDs(t *testing.T, f *firsthour.Flow) {
	t.Helper()
	ctx := context.Background()
	for _, crd := range []string{"servicemonitors", "prometheusrules"} {
		path := filepath.Join(framework.ToolsBin(), "monitoring.coreos.com_"+crd+".yaml")
		if out, err := f.Kubectl(ctx, "create", "-f", path); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	kit.Must(t, f.Clients.CL.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: promNamespace}}))
	kit.Must(t, f.Clients.CL.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: promAccount, Namespace: promNamespace}}))
	kit.Eventually(t, time.Minute, "the monitoring CRDs served", func() (bool, string) {
		out, err := f.Kubectl(ctx, "get", "servicemonitors,prometheusrules", "-A")
		return err == nil, out
	})
}

var (
	serviceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}
	prometheusRuleGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}
	labelUnsafe       = regexp.MustCompile(`[^a-zA-Z0-9_]`)
)

// startChartPrometheus starts Prometheus from the chart's objects as the cluster holds them
// and returns it with the dashboard's queries.
func startChartPrometheus(t *testing.T, f *firsthour.Flow) (*framework.Prometheus, []string) {
	t.Helper()
	ctx := context.Background()
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	tr, err := f.Clients.CS.CoreV1().ServiceAccounts(promNamespace).CreateToken(ctx, promAccount, tr, metav1.CreateOptions{})
	kit.Must(t, err)

	var scrapes []any
	interval := ""
	for _, name := range []string{"brewlet-operator", "brewlet-provisioner"} {
		sm := &unstructured.Unstructured{}
		sm.SetGroupVersionKind(serviceMonitorGVK)
		kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKey{Namespace: firsthour.Namespace, Name: name}, sm))
		sc, iv := scrapeConfig(t, sm)
		scrapes = append(scrapes, sc)
		interval = iv
	}
	rule := &unstructured.Unstructured{}
	rule.SetGroupVersionKind(prometheusRuleGVK)
	kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKey{Namespace: firsthour.Namespace, Name: "brewlet"}, rule))
	rules := ruleFile(t, rule)

	cm := &corev1.ConfigMap{}
	kit.Must(t, f.Clients.CL.Get(ctx, client.ObjectKey{Namespace: firsthour.Namespace, Name: "brewlet-dashboard"}, cm))
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	kit.Must(t, json.Unmarshal([]byte(cm.Data["brewlet.json"]), &dash))
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if len(exprs) == 0 {
		t.Fatal("the dashboard has no queries")
	}

	kubeconfig, err := os.ReadFile(f.C.Kubeconfig)
	kit.Must(t, err)
	files := map[string][]byte{"token": []byte(tr.Status.Token), "rules.yml": rules, "kubeconfig": kubeconfig}
	prom := framework.StartPrometheus(t, files, func(dir string) string {
		for _, s := range scrapes {
			sc := s.(map[string]any)
			sc["authorization"] = map[string]any{"credentials_file": filepath.Join(dir, "token")}
			sc["kubernetes_sd_configs"].([]any)[0].(map[string]any)["kubeconfig_file"] = filepath.Join(dir, "kubeconfig")
		}
		b, err := yaml.Marshal(map[string]any{
			"global":         map[string]any{"scrape_interval": interval, "evaluation_interval": "2s"},
			"rule_files":     []string{filepath.Join(dir, "rules.yml")},
			"scrape_configs": scrapes,
		})
		kit.Must(t, err)
		return string(b)
	})
	return prom, exprs
}

// scrapeConfig translates a ServiceMonitor as the Prometheus Operator does, for the fields
// the chart uses; a field it does not know fails the test, so the chart cannot grow one
// this test does not exercise.
func scrapeConfig(t *testing.T, sm *unstructured.Unstructured) (map[string]any, string) {
	t.Helper()
	spec := sm.Object["spec"].(map[string]any)
	relabel := []any{}
	match, _, _ := unstructured.NestedStringMap(spec, "selector", "matchLabels")
	for k, v := range match {
		relabel = append(relabel, map[string]any{"action": "keep",
			"source_labels": []string{"__meta_kubernetes_service_label_" + labelUnsafe.ReplaceAllString(k, "_")}, "regex": regexp.QuoteMeta(v)})
	}
	namespaces, _, _ := unstructured.NestedStringSlice(spec, "namespaceSelector", "matchNames")
	eps, _, _ := unstructured.NestedSlice(spec, "endpoints")
	if len(eps) != 1 {
		t.Fatalf("ServiceMonitor %s: %d endpoints, the test translates one", sm.GetName(), len(eps))
	}
	ep := eps[0].(map[string]any)
	sc := map[string]any{"job_name": "serviceMonitor/" + sm.GetNamespace() + "/" + sm.GetName() + "/0",
		"kubernetes_sd_configs": []any{map[string]any{"role": "endpoints", "namespaces": map[string]any{"names": namespaces}}}}
	interval := "30s"
	var user []any // the ServiceMonitor's relabelings, applied after the operator's own labels
	for k, v := range ep {
		switch k {
		case "port":
			relabel = append(relabel, map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_endpoint_port_name"}, "regex": v})
		case "scheme":
			sc["scheme"] = v
		case "path":
			sc["metrics_path"] = v
		case "interval":
			interval = v.(string)
			sc["scrape_interval"] = v
		case "bearerTokenFile":
			// Prometheus's own token in a pod; here the service account's, set by the caller.
		case "tlsConfig":
			tls := v.(map[string]any)
			if len(tls) != 1 || tls["insecureSkipVerify"] != true {
				t.Fatalf("ServiceMonitor %s: tlsConfig %v, the test translates insecureSkipVerify only", sm.GetName(), tls)
			}
			sc["tls_config"] = map[string]any{"insecure_skip_verify": true}
		case "relabelings":
			for _, r := range v.([]any) {
				rm := r.(map[string]any)
				// The CRD defaults action to replace.
				action, _ := rm["action"].(string)
				if rm["sourceLabels"] == nil || rm["targetLabel"] == nil || (action != "" && action != "replace") || len(rm) > 3 ||
					(len(rm) == 3 && action == "") {
					t.Fatalf("ServiceMonitor %s: relabeling %v, the test translates sourceLabels to targetLabel only", sm.GetName(), rm)
				}
				user = append(user, map[string]any{"source_labels": rm["sourceLabels"], "target_label": rm["targetLabel"]})
			}
		default:
			t.Fatalf("ServiceMonitor %s: endpoint field %s is not translated by this test", sm.GetName(), k)
		}
	}
	// The labels the Prometheus Operator adds to every target.
	for _, l := range [][2]string{{"__meta_kubernetes_namespace", "namespace"}, {"__meta_kubernetes_service_name", "service"},
		{"__meta_kubernetes_pod_name", "pod"}, {"__meta_kubernetes_service_name", "job"}} {
		src, dst := l[0], l[1]
		relabel = append(relabel, map[string]any{"source_labels": []string{src}, "target_label": dst})
	}
	sc["relabel_configs"] = append(relabel, user...)
	return sc, interval
}

// ruleFile is the PrometheusRule's groups as a rule file, every `for` made 0s: the test
// checks which alerts the cluster's state raises; promtool's tests check the delays.
func ruleFile(t *testing.T, rule *unstructured.Unstructured) []byte {
	t.Helper()
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	if len(groups) == 0 {
		t.Fatal("the PrometheusRule has no groups")
	}
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			r.(map[string]any)["for"] = "0s"
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	kit.Must(t, err)
	return b
}

// expectTargetsUp waits until Prometheus scrapes want targets per job, every one up.
func expectTargetsUp(t *testing.T, prom *framework.Prometheus, want map[string]int) {
	t.Helper()
	kit.Eventually(t, 2*time.Minute, "every component's /metrics scraped through its authenticated endpoint", func() (bool, string) {
		vec, err := prom.Query(context.Background(), "up")
		if err != nil {
			return false, err.Error()
		}
		got := map[string]int{}
		for _, s := range vec {
			if s.Value == 1 {
				got[string(s.Metric["job"])]++
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("up: %v", vec)
	})
}

// expectNoAlerts waits for every rule to be evaluated on data scraped from now on, then
// expects no alert at all.
func expectNoAlerts(t *testing.T, prom *framework.Prometheus) {
	t.Helper()
	since := time.Now().Add(6 * time.Second) // a scrape interval after now
	kit.Eventually(t, time.Minute, "the rules evaluated again", func() (bool, string) {
		ok, err := prom.Evaluated(context.Background(), since)
		if err != nil {
			t.Fatal(err)
		}
		return ok, "last evaluations before " + since.String()
	})
	alerts, err := prom.Alerts(context.Background())
	kit.Must(t, err)
	if len(alerts) > 0 {
		t.Fatalf("a healthy cluster raised alerts: %s", alertList(alerts))
	}
}

// firing waits until every alert of want (alertname, then label pairs) fires.
func firing(t *testing.T, prom *framework.Prometheus, d time.Duration, want ...[]string) {
	t.Helper()
	kit.Eventually(t, d, fmt.Sprintf("alerts %v firing", want), func() (bool, string) {
		alerts, err := prom.Alerts(context.Background())
		if err != nil {
			return false, err.Error()
		}
		for _, w := range want {
			if !slices.ContainsFunc(alerts, func(a promv1.Alert) bool { return alertMatches(a, w) }) {
				return false, alertList(alerts)
			}
		}
		return true, alertList(alerts)
	})
}

func alertMatches(a promv1.Alert, w []string) bool {
	if string(a.State) != "firing" || string(a.Labels["alertname"]) != w[0] {
		return false
	}
	for i := 1; i+1 < len(w); i += 2 {
		if string(a.Labels[model.LabelName(w[i])]) != w[i+1] {
			return false
		}
	}
	return true
}

func alertList(alerts []promv1.Alert) string {
	var b strings.Builder
	for _, a := range alerts {
		fmt.Fprintf(&b, "%s %s; ", a.State, a.Labels)
	}
	return b.String()
}

// queryValue is the single value expr has now.
func queryValue(t *testing.T, prom *framework.Prometheus, expr string) (float64, string) {
	t.Helper()
	vec, err := prom.Query(context.Background(), expr)
	if err != nil || len(vec) != 1 {
		return -1, fmt.Sprintf("%s: %v %v", expr, vec, err)
	}
	return float64(vec[0].Value), vec.String()
}
