package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"brewlet.sh/brewlet/test/kit"
)

// chartRestartsArgs turn rotation restarts on.
var chartRestartsArgs = []string{"--set", "operator.rotationRestarts.enabled=true"}

// chartWorkloadRights returns every rule of the render granting anything on apps
// Deployments, StatefulSets or DaemonSets, or on pods, by role ("Kind ns/name").
func chartWorkloadRights(t *testing.T, rc kit.ChartObjects) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range rc {
		var rules []rbacv1.PolicyRule
		switch r.Kind {
		case "ClusterRole":
			cr := &rbacv1.ClusterRole{}
			r.DecodeInto(t, cr)
			rules = cr.Rules
		case "Role":
			ro := &rbacv1.Role{}
			r.DecodeInto(t, ro)
			rules = ro.Rules
		default:
			continue
		}
		for _, gr := range [][2]string{{"apps", "deployments"}, {"apps", "statefulsets"}, {"apps", "daemonsets"}, {"", "pods"}, {"*", "*"}} {
			v, _ := chartRule(rules, gr[0], gr[1])
			if r.Kind == "Role" && r.Name == "brewlet-operator" && gr[1] == "pods" && slices.Equal(v, []string{"get", "list"}) {
				continue // the agents' pods in the release namespace, read to explain a missing agent
			}
			if len(v) > 0 {
				key := r.Kind + " " + r.Namespace + "/" + r.Name
				out[key] = append(out[key], fmt.Sprintf("%s/%s %v", gr[0], gr[1], v))
			}
		}
	}
	return out
}

// chartWantRestartRules asserts the rules of rotation restarts: the three workload kinds
// read and patched, their pods read.
func chartWantRestartRules(t *testing.T, role string, rules []rbacv1.PolicyRule) {
	t.Helper()
	for _, res := range []string{"deployments", "statefulsets", "daemonsets"} {
		chartWantVerbs(t, role, rules, "apps", res, "get", "list", "watch", "patch", "update")
	}
	chartWantVerbs(t, role, rules, "", "pods", "get", "list", "watch")
	if len(rules) != 2 {
		t.Errorf("%s: %d rules, want exactly the workloads and their pods: %+v", role, len(rules), rules)
	}
}

// chartCheckRestartPolicy asserts that the render holds the restarts policy of
// config/policy with the operator's service account of namespace ns, and its binding.
func chartCheckRestartPolicy(t *testing.T, rc kit.ChartObjects, ns string) {
	t.Helper()
	for _, name := range []string{kit.ChartRestartsName, kit.ChartRestartsName + "-barrier"} {
		wantVAP, wantBinding := chartPolicyFromConfig(t, "operator-restarts.yaml", name)
		wantVAP.Spec.MatchConditions[0].Expression = "request.userInfo.username == 'system:serviceaccount:" + ns + ":brewlet-operator'"
		vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		rc.Decode(t, "ValidatingAdmissionPolicy", name, vap)
		if !equality.Semantic.DeepEqual(vap.Spec, wantVAP.Spec) {
			t.Errorf("chart's policy %s differs from config/policy/operator-restarts.yaml:\n got %+v\nwant %+v", name, vap.Spec, wantVAP.Spec)
		}
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		rc.Decode(t, "ValidatingAdmissionPolicyBinding", name, binding)
		if !equality.Semantic.DeepEqual(binding.Spec, wantBinding.Spec) {
			t.Errorf("policy binding %s %+v, want %+v", name, binding.Spec, wantBinding.Spec)
		}
	}
}

// chartCheckBinding asserts that binding (a RoleBinding or ClusterRoleBinding) gives role
// kind/name to the operator's service account of namespace ns, and nothing else.
func chartCheckBinding(t *testing.T, what string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, kind, name, ns string) {
	t.Helper()
	if ref.Kind != kind || ref.Name != name || len(subjects) != 1 || subjects[0].Kind != "ServiceAccount" ||
		subjects[0].Name != "brewlet-operator" || subjects[0].Namespace != ns {
		t.Errorf("%s binds %+v to %+v, want %s %s to service account %s/brewlet-operator", what, ref, subjects, kind, name, ns)
	}
}

func chartRestartsOff(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools()...)
	chartCheckCommon(t, rc, kit.ChartNS)
	if rights := chartWorkloadRights(t, rc); len(rights) != 0 {
		t.Errorf("rights on workloads or pods without rotation restarts: %v", rights)
	}
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if rc.Has(kind, kit.ChartRestartsName) || rc.Has(kind, kit.ChartRestartsName+"-barrier") {
			t.Errorf("%s %s rendered with rotation restarts off", kind, kit.ChartRestartsName)
		}
	}
	oc := rc.Find("Deployment", "brewlet-operator")
	if oc == nil || strings.Contains(string(oc.JSON), "--rotation-restart") {
		t.Errorf("operator Deployment runs rotation restarts while they are off")
	}
	if oc == nil || strings.Contains(string(oc.JSON), "--node-stale-after") {
		t.Errorf("operator Deployment sets --node-stale-after without operator.nodeStaleAfter")
	}
}

func chartRestartsEveryNamespace(t *testing.T) {
	for _, ns := range []string{kit.ChartNS, "other-ns"} {
		rc := kit.ChartMustRender(t, ns, chartPools(append(slices.Clone(chartRestartsArgs), "--set", "operator.rotationRestarts.maxConcurrent=7",
			"--set", "operator.rotationRestarts.progressDeadline=90s", "--set", "operator.rotationRestarts.maxFailures=0",
			"--set", "operator.rotationRestarts.soak=5m", "--set", "operator.nodeStaleAfter=45s")...)...)
		dep, _ := chartCheckCommon(t, rc, ns)
		oc := dep.Spec.Template.Spec.Containers[0]
		chartWantArg(t, oc, "--rotation-restarts", "")
		chartWantArg(t, oc, "--rotation-restart-max-concurrent", "7")
		chartWantArg(t, oc, "--rotation-restart-progress-deadline", "90s")
		chartWantArg(t, oc, "--rotation-restart-max-failures", "0")
		chartWantArg(t, oc, "--rotation-restart-soak", "5m")
		chartWantArg(t, oc, "--node-stale-after", "45s")
		chartNoArg(t, oc, "--rotation-restart-namespaces")
		chartNoArg(t, oc, "--rotation-restart-window")
		cr := &rbacv1.ClusterRole{}
		rc.Decode(t, "ClusterRole", kit.ChartRestartsName, cr)
		chartWantRestartRules(t, "ClusterRole "+kit.ChartRestartsName, cr.Rules)
		crb := &rbacv1.ClusterRoleBinding{}
		rc.Decode(t, "ClusterRoleBinding", kit.ChartRestartsName, crb)
		chartCheckBinding(t, "ClusterRoleBinding "+kit.ChartRestartsName, crb.RoleRef, crb.Subjects, "ClusterRole", kit.ChartRestartsName, ns)
		// These are the only rights on workloads and pods.
		rights := chartWorkloadRights(t, rc)
		if _, ok := rights["ClusterRole /"+kit.ChartRestartsName]; !ok || len(rights) != 1 {
			t.Errorf("rights on workloads: %v, want only ClusterRole %s", rights, kit.ChartRestartsName)
		}
		if rc.Has("Role", kit.ChartRestartsName) || rc.Has("RoleBinding", kit.ChartRestartsName) {
			t.Errorf("Roles for rotation restarts without namespaces: %v", rc.Names())
		}
		chartCheckRestartPolicy(t, rc, ns)
	}
}

func chartRestartsInNamespaces(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools(append(slices.Clone(chartRestartsArgs),
		"--set-json", `operator.rotationRestarts.namespaces=["a","b"]`)...)...)
	dep, _ := chartCheckCommon(t, rc, kit.ChartNS)
	chartWantArg(t, dep.Spec.Template.Spec.Containers[0], "--rotation-restart-namespaces", "a,b")
	want := map[string]bool{}
	for _, ns := range []string{"a", "b"} {
		role := &rbacv1.Role{}
		rc.DecodeIn(t, "Role", ns, kit.ChartRestartsName, role)
		chartWantRestartRules(t, "Role "+ns+"/"+kit.ChartRestartsName, role.Rules)
		rb := &rbacv1.RoleBinding{}
		rc.DecodeIn(t, "RoleBinding", ns, kit.ChartRestartsName, rb)
		chartCheckBinding(t, "RoleBinding "+ns+"/"+kit.ChartRestartsName, rb.RoleRef, rb.Subjects, "Role", kit.ChartRestartsName, kit.ChartNS)
		want["Role "+ns+"/"+kit.ChartRestartsName] = true
	}
	rights := chartWorkloadRights(t, rc)
	for role := range rights {
		if !want[role] {
			t.Errorf("%s grants %v: with namespaces, only their Roles may", role, rights[role])
		}
	}
	if len(rights) != len(want) {
		t.Errorf("rights on workloads %v, want exactly the Roles %v", rights, want)
	}
	if rc.Has("ClusterRole", kit.ChartRestartsName) || rc.Has("ClusterRoleBinding", kit.ChartRestartsName) {
		t.Errorf("cluster-wide restart rights with namespaces: %v", rc.Names())
	}
	for _, r := range rc {
		if (r.Kind == "Role" || r.Kind == "RoleBinding") && r.Name == kit.ChartRestartsName && r.Namespace != "a" && r.Namespace != "b" {
			t.Errorf("%s %s in namespace %q", r.Kind, r.Name, r.Namespace)
		}
	}
	chartCheckRestartPolicy(t, rc, kit.ChartNS)
}

// The restart window becomes the operator's three flags; a schedule without a duration,
// or a value the schema does not know, is refused at render time.
func chartRestartsWindow(t *testing.T) {
	w := "operator.rotationRestarts.window."
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools(append(slices.Clone(chartRestartsArgs), "--set", w+"schedule=0 2 * * 1-5",
		"--set", w+"duration=2h", "--set", w+"timeZone=Europe/Berlin")...)...)
	dep, _ := chartCheckCommon(t, rc, kit.ChartNS)
	oc := dep.Spec.Template.Spec.Containers[0]
	chartWantArg(t, oc, "--rotation-restart-window", "0 2 * * 1-5")
	chartWantArg(t, oc, "--rotation-restart-window-duration", "2h")
	chartWantArg(t, oc, "--rotation-restart-window-time-zone", "Europe/Berlin")
	for _, bad := range []struct{ set, want string }{
		{w + "schedule=@daily", "window.duration is required"},
		{w + "duration=two hours", "duration"},
		{w + "zone=UTC", "zone"},
	} {
		_, out, err := kit.ChartTemplateRaw(t, kit.ChartNS, chartPools(append(slices.Clone(chartRestartsArgs), "--set", bad.set,
			"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")...)...)
		if err == nil || !strings.Contains(out, bad.want) {
			t.Errorf("--set %s: err %v, want a refusal naming %q\n%s", bad.set, err, bad.want, out)
		}
	}
}

func chartRestartsPolicyAPI(t *testing.T) {
	vap := "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
	mwc := "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration"
	relaxed := "operator.rotationRestarts.requireAdmissionPolicy=false"
	// Required (the default), the chart refuses to render unless the API is announced:
	// helm template alone announces no kinds; a cluster without the API announces others.
	for _, kinds := range [][]string{nil, {"--api-versions", mwc}} {
		_, out, err := kit.ChartTemplateRaw(t, kit.ChartNS, chartPools(append(slices.Clone(chartRestartsArgs), kinds...)...)...)
		if err == nil || !strings.Contains(out, "does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy") ||
			!strings.Contains(out, "requireAdmissionPolicy=false") || !strings.Contains(out, "--api-versions") {
			t.Errorf("restarts without the policy API (kinds %v): err %v, want the chart's refusal\n%s", kinds, err, out)
		}
	}
	rc, out, err := kit.ChartTemplateRaw(t, kit.ChartNS, chartPools(append(slices.Clone(chartRestartsArgs), "--api-versions", vap)...)...)
	if err != nil {
		t.Fatalf("restarts with the policy API announced: %v\n%s", err, out)
	}
	chartCheckRestartPolicy(t, rc, kit.ChartNS)
	// Not required: RBAC alone where the API is known to be missing, the policy
	// wherever it exists or cannot be known (helm template alone).
	for _, c := range []struct {
		kinds  []string
		policy bool
	}{{[]string{"--api-versions", mwc}, false}, {[]string{"--api-versions", mwc, "--api-versions", vap}, true}, {nil, true}} {
		rc, out, err := kit.ChartTemplateRaw(t, kit.ChartNS, chartPools(append(slices.Clone(chartRestartsArgs), append([]string{"--set", relaxed}, c.kinds...)...)...)...)
		if err != nil {
			t.Errorf("requireAdmissionPolicy=false, kinds %v: %v\n%s", c.kinds, err, out)
			continue
		}
		if !rc.Has("ClusterRole", kit.ChartRestartsName) {
			t.Errorf("requireAdmissionPolicy=false, kinds %v: no restart rights: %v", c.kinds, rc.Names())
		}
		if rc.Has("ValidatingAdmissionPolicy", kit.ChartRestartsName) != c.policy || rc.Has("ValidatingAdmissionPolicyBinding", kit.ChartRestartsName) != c.policy {
			t.Errorf("requireAdmissionPolicy=false, kinds %v: policy rendered %v, want %v", c.kinds,
				rc.Has("ValidatingAdmissionPolicy", kit.ChartRestartsName), c.policy)
		}
	}
}
