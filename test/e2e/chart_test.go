package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
)

// The Helm chart charts/brewlet: helm lint, helm template for every value combination that
// changes a template (decoded strictly into Kubernetes types: a misspelt field fails), the
// rendered chart validated and installed by a real API server, and the chart's provisioner
// RBAC together with its node-scope policy judged by that API server.

const (
	chartNS          = "brewlet-system"
	chartKubeVersion = "1.37.2"
	chartPool        = `[{"key":"pool.example/name","values":["general","batch"]}]`
	chartDigest      = "sha256:" + "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
)

// chartObject is one object of a helm template output.
type chartObject struct {
	Kind, Name, Namespace string
	JSON                  []byte
}

type chartObjects []chartObject

// find returns the object of kind and name, or nil.
func (rc chartObjects) find(kind, name string) *chartObject {
	for i := range rc {
		if rc[i].Kind == kind && rc[i].Name == name {
			return &rc[i]
		}
	}
	return nil
}

func (rc chartObjects) has(kind, name string) bool { return rc.find(kind, name) != nil }

// findIn returns the object of kind and name in namespace ns, or nil.
func (rc chartObjects) findIn(kind, ns, name string) *chartObject {
	for i := range rc {
		if rc[i].Kind == kind && rc[i].Namespace == ns && rc[i].Name == name {
			return &rc[i]
		}
	}
	return nil
}

// decode fills obj from the object of kind and name, refusing fields the type lacks.
func (rc chartObjects) decode(t *testing.T, kind, name string, obj any) {
	t.Helper()
	r := rc.find(kind, name)
	if r == nil {
		t.Fatalf("chart chartObject no %s %s; it has %v", kind, name, rc.names())
	}
	r.decodeInto(t, obj)
}

// decodeIn is decode for the object of kind and name in namespace ns.
func (rc chartObjects) decodeIn(t *testing.T, kind, ns, name string, obj any) {
	t.Helper()
	r := rc.findIn(kind, ns, name)
	if r == nil {
		t.Fatalf("chart renders no %s %s/%s; it has %v", kind, ns, name, rc.names())
	}
	r.decodeInto(t, obj)
}

func (r *chartObject) decodeInto(t *testing.T, obj any) {
	t.Helper()
	kind, name := r.Kind, r.Name
	dec := json.NewDecoder(bytes.NewReader(r.JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		t.Fatalf("%s %s does not decode strictly into %T: %v", kind, name, obj, err)
	}
}

func (rc chartObjects) names() []string {
	var out []string
	for _, r := range rc {
		out = append(out, r.Kind+"/"+r.Name)
	}
	return out
}

func chartDir(t *testing.T) string { return filepath.Join(framework.RepoRoot(t), "charts", "brewlet") }

// chartAPIVersions are the kinds a chartKubeVersion cluster announces that the chart asks
// about (helm template alone announces group versions only, no kinds; a cluster's
// discovery announces both).
var chartAPIVersions = []string{"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
	"--api-versions", "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration"}

// chartTemplate renders the chart with args (values flags) into namespace ns, as for a
// chartKubeVersion cluster.
func chartTemplate(t *testing.T, ns string, args ...string) (chartObjects, string, error) {
	t.Helper()
	return chartTemplateRaw(t, ns, append(slices.Clone(chartAPIVersions), args...)...)
}

// chartTemplateRaw renders the chart with args only: no kinds announced unless args do.
func chartTemplateRaw(t *testing.T, ns string, args ...string) (chartObjects, string, error) {
	t.Helper()
	cmd := exec.Command(framework.Tool(t, "helm"), append([]string{"template", "brewlet", chartDir(t),
		"--namespace", ns, "--kube-version", chartKubeVersion}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, string(out) + stderr.String(), err
	}
	rc, err := chartSplit(out)
	return rc, string(out), err
}

func chartSplit(b []byte) (chartObjects, error) {
	var rc chartObjects
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return rc, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := k8syaml.ToJSON(doc)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(j)) == 0 || string(bytes.TrimSpace(j)) == "null" {
			continue
		}
		var head struct {
			metav1.TypeMeta   `json:",inline"`
			metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(j, &head); err != nil {
			return nil, err
		}
		rc = append(rc, chartObject{Kind: head.Kind, Name: head.Name, Namespace: head.Namespace, JSON: j})
	}
}

func chartMustRender(t *testing.T, ns string, args ...string) chartObjects {
	t.Helper()
	rc, out, err := chartTemplate(t, ns, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, out)
	}
	return rc
}

func TestChartLint(t *testing.T) {
	helm, dir := framework.Tool(t, "helm"), chartDir(t)
	for _, args := range [][]string{
		{"lint", dir},
		{"lint", "--strict", dir, "--set-json", "provisioner.pools=" + chartPool},
		{"lint", "--strict", dir, "--set-json", "provisioner.pools=" + chartPool, "--set", "metrics.enabled=true",
			"--set", "admission.enabled=false", "--set", "provisioner.includeControlPlane=true"},
		// helm lint announces no kinds: the restarts policy is rendered with
		// requireAdmissionPolicy=false only.
		{"lint", "--strict", dir, "--set-json", "provisioner.pools=" + chartPool, "--set", "operator.rotationRestarts.enabled=true",
			"--set", "operator.rotationRestarts.requireAdmissionPolicy=false"},
		{"lint", "--strict", dir, "--set-json", "provisioner.pools=" + chartPool, "--set", "operator.rotationRestarts.enabled=true",
			"--set", "operator.rotationRestarts.requireAdmissionPolicy=false", "--set-json", `operator.rotationRestarts.namespaces=["a","b"]`},
	} {
		if out, err := exec.Command(helm, args...).CombinedOutput(); err != nil {
			t.Errorf("helm %v: %v\n%s", args, err, out)
		}
	}
}

// The CRDs the chart installs are the generated ones, byte for byte (make generate copies
// them; this test catches a copy that was forgotten).
func TestChartCRDsMatchGenerated(t *testing.T) {
	root := framework.RepoRoot(t)
	gen, err := filepath.Glob(filepath.Join(root, "config", "crd", "*.yaml"))
	if err != nil || len(gen) == 0 {
		t.Fatalf("no generated CRDs: %v", err)
	}
	inChart, _ := filepath.Glob(filepath.Join(chartDir(t), "crds", "*.yaml"))
	base := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if !slices.Equal(base(gen), base(inChart)) {
		t.Fatalf("charts/brewlet/crds holds %v, config/crd holds %v: run 'make generate'", base(inChart), base(gen))
	}
	for _, p := range gen {
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(chartDir(t), "crds", filepath.Base(p)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("charts/brewlet/crds/%s differs from config/crd (run 'make generate'): %v", filepath.Base(p), err)
		}
	}
}

func chartArg(c corev1.Container, flag string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
		if a == flag {
			return "", true
		}
	}
	return "", false
}

func chartWantArg(t *testing.T, c corev1.Container, flag, want string) {
	t.Helper()
	if got, ok := chartArg(c, flag); !ok || got != want {
		t.Errorf("container %s: %s=%q (present %v), want %q; args %v", c.Name, flag, got, ok, want, c.Args)
	}
}

func chartNoArg(t *testing.T, c corev1.Container, flag string) {
	t.Helper()
	if got, ok := chartArg(c, flag); ok {
		t.Errorf("container %s: unexpected %s=%q", c.Name, flag, got)
	}
}

// chartEnv returns the value of the container's env var name (present or not).
func chartEnv(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// chartAPIServerEnv is the API server endpoint the apiServer values give both containers.
var chartAPIServerEnv = []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}

// chartRule returns the verbs a role grants on group/resource (optionally only with names).
func chartRule(rules []rbacv1.PolicyRule, group, resource string) (verbs, names []string) {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
			verbs = append(verbs, r.Verbs...)
			names = append(names, r.ResourceNames...)
		}
	}
	slices.Sort(verbs)
	return slices.Compact(verbs), names
}

func chartWantVerbs(t *testing.T, role string, rules []rbacv1.PolicyRule, group, resource string, want ...string) {
	t.Helper()
	got, _ := chartRule(rules, group, resource)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s on %s/%s: verbs %v, want %v", role, group, resource, got, want)
	}
}

// chartCheckCommon asserts what every render with pools has, whatever the toggles.
func chartCheckCommon(t *testing.T, rc chartObjects, ns string) (*appsv1.Deployment, *appsv1.DaemonSet) {
	t.Helper()
	return chartCheckCommonWith(t, rc, ns, "brewlet-operator", 2)
}

func chartCheckCommonWith(t *testing.T, rc chartObjects, ns, leaseName string, replicas int32) (*appsv1.Deployment, *appsv1.DaemonSet) {
	t.Helper()
	for _, r := range rc {
		switch r.Kind {
		case "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if r.Namespace != "" {
				t.Errorf("cluster-scoped %s %s has namespace %q", r.Kind, r.Name, r.Namespace)
			}
		default:
			// Rotation restarts limited to namespaces have their Roles there (checked by
			// chartCheckRestarts).
			if (r.Kind == "Role" || r.Kind == "RoleBinding") && r.Name == chartRestartsName {
				continue
			}
			if r.Namespace != ns {
				t.Errorf("%s %s in namespace %q, want the release namespace %q", r.Kind, r.Name, r.Namespace, ns)
			}
		}
	}
	dep := &appsv1.Deployment{}
	rc.decode(t, "Deployment", "brewlet-operator", dep)
	ps := dep.Spec.Template.Spec
	if len(ps.Containers) != 1 {
		t.Fatalf("operator containers: %d", len(ps.Containers))
	}
	c := ps.Containers[0]
	if ps.ServiceAccountName != "brewlet-operator" || ps.HostPID || ps.HostNetwork {
		t.Errorf("operator pod: sa %q hostPID %v hostNetwork %v", ps.ServiceAccountName, ps.HostPID, ps.HostNetwork)
	}
	psc, sc := ps.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("operator pod security context %+v: want non-root 65532 with seccomp RuntimeDefault", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		(sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("operator container security context %+v", sc)
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "probes" {
			t.Errorf("operator probe for %s: %+v", p.path, p.probe)
		}
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "probes" && p.ContainerPort == 8081 }) {
		t.Errorf("operator ports %+v: want probes 8081", c.Ports)
	}
	chartWantArg(t, c, "--health-probe-address", ":8081")
	chartWantArg(t, c, "--leader-elect", "true")
	chartWantArg(t, c, "--leader-election-namespace", ns)
	chartWantArg(t, c, "--leader-election-id", leaseName)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != replicas {
		t.Errorf("operator replicas %v, want %d", dep.Spec.Replicas, replicas)
	}

	// RBAC split per component.
	op := &rbacv1.ClusterRole{}
	rc.decode(t, "ClusterRole", "brewlet-operator", op)
	chartWantVerbs(t, "operator", op.Rules, "node.brewlet.sh", "runtimeimages", "get", "list", "watch", "update", "patch")
	chartWantVerbs(t, "operator", op.Rules, "node.brewlet.sh", "runtimeimages/status", "get", "update", "patch")
	chartWantVerbs(t, "operator", op.Rules, "node.brewlet.sh", "runtimeimages/finalizers", "get", "update", "patch")
	chartWantVerbs(t, "operator", op.Rules, "node.brewlet.sh", "nodeprofiles/status", "get", "update", "patch")
	chartWantVerbs(t, "operator", op.Rules, "node.brewlet.sh", "noderuntimes", "get", "list", "watch", "create", "update", "patch")
	chartWantVerbs(t, "operator", op.Rules, "node.brewlet.sh", "noderuntimes/status")
	chartWantVerbs(t, "operator", op.Rules, "", "nodes", "get", "list", "watch")
	chartWantVerbs(t, "operator", op.Rules, "node.k8s.io", "runtimeclasses", "get", "list", "watch", "create", "update", "patch", "delete")
	chartWantVerbs(t, "operator", op.Rules, "events.k8s.io", "events", "create", "patch", "update")
	chartWantVerbs(t, "operator", op.Rules, "", "secrets") // never cluster-wide
	opRole := &rbacv1.Role{}
	rc.decode(t, "Role", "brewlet-operator", opRole)
	// Writes only to its own Lease; the agents' Leases (the nodes' heartbeats) are read.
	if v, names := chartRule(opRole.Rules, "coordination.k8s.io", "leases"); !slices.Equal(v, []string{"create", "get", "list", "patch", "update", "watch"}) ||
		!slices.Equal(names, []string{leaseName}) {
		t.Errorf("operator leases: verbs %v names %v", v, names)
	}
	// The agents' pods, read (never watched or written) to say why a node has no running agent.
	chartWantVerbs(t, "operator", opRole.Rules, "", "pods", "get", "list")
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, n := range []string{"brewlet-operator", "brewlet-provisioner"} {
			var subjects []rbacv1.Subject
			var ref rbacv1.RoleRef
			if kind == "RoleBinding" {
				b := &rbacv1.RoleBinding{}
				rc.decode(t, kind, n, b)
				subjects, ref = b.Subjects, b.RoleRef
			} else {
				b := &rbacv1.ClusterRoleBinding{}
				rc.decode(t, kind, n, b)
				subjects, ref = b.Subjects, b.RoleRef
			}
			if ref.Name != n || len(subjects) != 1 || subjects[0].Name != n || subjects[0].Namespace != ns || subjects[0].Kind != "ServiceAccount" {
				t.Errorf("%s %s binds %+v to %+v", kind, n, ref, subjects)
			}
		}
	}
	pr := &rbacv1.ClusterRole{}
	rc.decode(t, "ClusterRole", "brewlet-provisioner", pr)
	chartWantVerbs(t, "provisioner", pr.Rules, "", "nodes", "get", "list", "watch", "patch", "update")
	chartWantVerbs(t, "provisioner", pr.Rules, "node.brewlet.sh", "noderuntimes", "get", "list", "watch", "create")
	chartWantVerbs(t, "provisioner", pr.Rules, "node.brewlet.sh", "noderuntimes/status", "get", "update", "patch")
	chartWantVerbs(t, "provisioner", pr.Rules, "node.brewlet.sh", "nodeprofiles", "get", "list", "watch")
	chartWantVerbs(t, "provisioner", pr.Rules, "node.brewlet.sh", "runtimeimages", "get", "list", "watch")
	chartWantVerbs(t, "provisioner", pr.Rules, "", "secrets")
	prRole := &rbacv1.Role{}
	rc.decode(t, "Role", "brewlet-provisioner", prRole)
	chartWantVerbs(t, "provisioner", prRole.Rules, "coordination.k8s.io", "leases", "get", "create", "update")

	// The node-scope policy is config/policy's with this release's service account.
	wantVAP, wantBinding := chartPolicyFromConfig(t, "provisioner-node-scope.yaml", "brewlet-provisioner-node-scope")
	wantVAP.Spec.MatchConditions[0].Expression = "request.userInfo.username == 'system:serviceaccount:" + ns + ":brewlet-provisioner'"
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	rc.decode(t, "ValidatingAdmissionPolicy", "brewlet-provisioner-node-scope", vap)
	if !equality.Semantic.DeepEqual(vap.Spec, wantVAP.Spec) {
		t.Errorf("chart's node-scope policy differs from config/policy:\n got %+v\nwant %+v", vap.Spec, wantVAP.Spec)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	rc.decode(t, "ValidatingAdmissionPolicyBinding", "brewlet-provisioner-node-scope", binding)
	if !equality.Semantic.DeepEqual(binding.Spec, wantBinding.Spec) {
		t.Errorf("policy binding %+v, want %+v", binding.Spec, wantBinding.Spec)
	}

	ds := &appsv1.DaemonSet{}
	rc.decode(t, "DaemonSet", "brewlet-provisioner", ds)
	// The operator finds the agents' pods by these labels (status.nodesWithoutAgent).
	for k, v := range vocab.AgentPodLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("provisioner pod template labels %v lack %s=%s", ds.Spec.Template.Labels, k, v)
		}
	}
	dps := ds.Spec.Template.Spec
	if len(dps.Containers) != 1 {
		t.Fatalf("provisioner containers: %d", len(dps.Containers))
	}
	pc := dps.Containers[0]
	if dps.ServiceAccountName != "brewlet-provisioner" || dps.HostIPC {
		t.Errorf("provisioner pod: sa %q hostIPC %v", dps.ServiceAccountName, dps.HostIPC)
	}
	// The host network (provisioner.hostNetwork, off by default) always with the DNS policy
	// that keeps cluster names resolving.
	if dps.HostNetwork != (dps.DNSPolicy == corev1.DNSClusterFirstWithHostNet) {
		t.Errorf("provisioner pod: hostNetwork %v with dnsPolicy %q", dps.HostNetwork, dps.DNSPolicy)
	}
	// hostPID exactly because the mount table is read from the host's PID 1.
	mi, _ := chartArg(pc, "--mountinfo")
	if dps.HostPID != (mi == "/proc/1/mountinfo") || !dps.HostPID {
		t.Errorf("hostPID %v with --mountinfo=%q: want both (the host mount table through PID 1)", dps.HostPID, mi)
	}
	if pc.SecurityContext == nil || pc.SecurityContext.Privileged == nil || !*pc.SecurityContext.Privileged {
		t.Errorf("provisioner is not privileged: %+v", pc.SecurityContext)
	}
	env := map[string]string{}
	for _, e := range pc.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	for k, v := range map[string]string{"NODE_NAME": "spec.nodeName", "POD_NAMESPACE": "metadata.namespace",
		"POD_NAME": "metadata.name", "POD_UID": "metadata.uid"} {
		if env[k] != v {
			t.Errorf("provisioner env %s from %q, want the downward API's %s", k, env[k], v)
		}
	}
	if dps.AutomountServiceAccountToken == nil || !*dps.AutomountServiceAccountToken {
		t.Errorf("provisioner must get the kubelet's pod-bound token (node claim for the policy)")
	}
	return dep, ds
}

// chartPolicyFromConfig reads the policy and binding named name from config/policy/file.
func chartPolicyFromConfig(t *testing.T, file, name string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(t), "config", "policy", file))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := chartSplit(b)
	if err != nil {
		t.Fatal(err)
	}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	rc.decode(t, "ValidatingAdmissionPolicy", name, vap)
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	rc.decode(t, "ValidatingAdmissionPolicyBinding", name, binding)
	return vap, binding
}

// chartRestartsName names the rotation restarts' RBAC objects and admission policy.
const chartRestartsName = "brewlet-operator-restarts"

// chartRestartsArgs turn rotation restarts on.
var chartRestartsArgs = []string{"--set", "operator.rotationRestarts.enabled=true"}

// chartWorkloadRights returns every rule of the render granting anything on apps
// Deployments, StatefulSets or DaemonSets, or on pods, by role ("Kind ns/name").
func chartWorkloadRights(t *testing.T, rc chartObjects) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range rc {
		var rules []rbacv1.PolicyRule
		switch r.Kind {
		case "ClusterRole":
			cr := &rbacv1.ClusterRole{}
			r.decodeInto(t, cr)
			rules = cr.Rules
		case "Role":
			ro := &rbacv1.Role{}
			r.decodeInto(t, ro)
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
func chartCheckRestartPolicy(t *testing.T, rc chartObjects, ns string) {
	t.Helper()
	for _, name := range []string{chartRestartsName, chartRestartsName + "-barrier"} {
		wantVAP, wantBinding := chartPolicyFromConfig(t, "operator-restarts.yaml", name)
		wantVAP.Spec.MatchConditions[0].Expression = "request.userInfo.username == 'system:serviceaccount:" + ns + ":brewlet-operator'"
		vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		rc.decode(t, "ValidatingAdmissionPolicy", name, vap)
		if !equality.Semantic.DeepEqual(vap.Spec, wantVAP.Spec) {
			t.Errorf("chart's policy %s differs from config/policy/operator-restarts.yaml:\n got %+v\nwant %+v", name, vap.Spec, wantVAP.Spec)
		}
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		rc.decode(t, "ValidatingAdmissionPolicyBinding", name, binding)
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

// chartHostPaths maps each hostPath volume's host path to the path it is mounted at.
func chartHostPaths(ps corev1.PodSpec) map[string]string {
	vols := map[string]string{}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			vols[v.Name] = v.HostPath.Path
		}
	}
	out := map[string]string{}
	for _, m := range ps.Containers[0].VolumeMounts {
		if p, ok := vols[m.Name]; ok {
			out[p] = m.MountPath
		}
	}
	return out
}

func TestChartTemplate(t *testing.T) {
	framework.Tool(t, "helm")
	pools := []string{"--set-json", "provisioner.pools=" + chartPool}
	with := func(extra ...string) []string { return append(slices.Clone(pools), extra...) }

	t.Run("defaults with pools", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, pools...)
		dep, ds := chartCheckCommon(t, rc, chartNS)
		oc, pc := dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0]
		if oc.Image != "ghcr.io/brewlet-sh/brewlet-operator:0.1.0" || pc.Image != "ghcr.io/brewlet-sh/brewlet-provisioner:0.1.0" {
			t.Errorf("images %q %q: want the appVersion tag", oc.Image, pc.Image)
		}
		// Metrics are opt-in.
		chartWantArg(t, oc, "--metrics-address", "0")
		chartNoArg(t, pc, "--metrics-address")
		if rc.has("Service", "brewlet-operator-metrics") || rc.has("Service", "brewlet-provisioner-metrics") {
			t.Errorf("metrics Services chartObject with metrics.enabled=false")
		}
		// Pod admission is on: the same webhook the operator's code describes.
		chartWantArg(t, oc, "--webhook-port", "9443")
		chartWantArg(t, oc, "--webhook-cert-dir", "/var/run/brewlet/webhook-certs")
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		rc.decode(t, "MutatingWebhookConfiguration", admission.ConfigurationName, mwc)
		want := admission.Configuration(admission.ClientConfig{ServiceNamespace: chartNS, ServiceName: admission.ServiceName, ServicePort: 443})
		if !equality.Semantic.DeepEqual(mwc.Webhooks, want.Webhooks) {
			t.Errorf("chart webhook differs from admission.Configuration:\n got %+v\nwant %+v", mwc.Webhooks, want.Webhooks)
		}
		svc := &corev1.Service{}
		rc.decode(t, "Service", admission.ServiceName, svc)
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "webhook" ||
			!reflect.DeepEqual(svc.Spec.Selector, dep.Spec.Selector.MatchLabels) {
			t.Errorf("webhook Service %+v does not route 443 to the operator's webhook port", svc.Spec)
		}
		if !slices.ContainsFunc(oc.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" && p.ContainerPort == 9443 }) {
			t.Errorf("operator has no webhook port 9443: %+v", oc.Ports)
		}
		op, role := &rbacv1.ClusterRole{}, &rbacv1.Role{}
		rc.decode(t, "ClusterRole", "brewlet-operator", op)
		rc.decode(t, "Role", "brewlet-operator", role)
		if v, names := chartRule(op.Rules, "admissionregistration.k8s.io", "mutatingwebhookconfigurations"); !slices.Equal(v, []string{"get", "patch", "update"}) ||
			!slices.Equal(names, []string{admission.ConfigurationName}) {
			t.Errorf("operator on its webhook configuration: verbs %v names %v", v, names)
		}
		if v, names := chartRule(role.Rules, "", "secrets"); !slices.Equal(v, []string{"create", "get", "patch", "update"}) ||
			!slices.Equal(names, []string{admission.SecretName}) {
			t.Errorf("operator on secrets: verbs %v names %v", v, names)
		}
		// Placed on the pools only, never on control-plane nodes.
		aff := ds.Spec.Template.Spec.Affinity
		if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			t.Fatalf("provisioner without required node affinity: %+v", aff)
		}
		wantTerms := []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "pool.example/name", Operator: corev1.NodeSelectorOpIn, Values: []string{"general", "batch"}},
			{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.NodeSelectorOpDoesNotExist},
		}}, {MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "brewlet.sh/host-changes", Operator: corev1.NodeSelectorOpIn, Values: []string{"present"}},
			{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.NodeSelectorOpDoesNotExist},
		}}}
		if got := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; !equality.Semantic.DeepEqual(got, wantTerms) {
			t.Errorf("provisioner node affinity %+v, want %+v", got, wantTerms)
		}
		if len(ds.Spec.Template.Spec.Tolerations) != 0 {
			t.Errorf("provisioner tolerates %+v by default", ds.Spec.Template.Spec.Tolerations)
		}
		// Host paths, mounted where the agent writes them.
		hp := chartHostPaths(ds.Spec.Template.Spec)
		for host, in := range map[string]string{"/opt/brewlet": "/opt/brewlet", "/var/lib/brewlet": "/var/lib/brewlet",
			"/run/brewlet": "/run/brewlet", "/etc/containerd": "/etc/containerd", "/run/containerd": "/run/containerd",
			"/usr/local/bin": "/host/usr/local/bin", "/": "/host"} {
			if hp[host] != in {
				t.Errorf("host path %s mounted at %q, want %q (all: %v)", host, hp[host], in, hp)
			}
		}
		if len(hp) != 7 {
			t.Errorf("provisioner host paths %v: want exactly the seven Brewlet needs", hp)
		}
		// The node's root, for containerd's binary and the restart command: read-only, and
		// following the node's mounts (systemd's socket in its /run).
		for _, m := range pc.VolumeMounts {
			if m.MountPath == "/host" && (!m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
				t.Errorf("the node's root mounted %+v, want read-only with HostToContainer propagation", m)
			}
		}
		for flag, v := range map[string]string{"--authorization-ttl": "5m", "--gc-grace": "1h", "--containerd-restart": "validated",
			"--containerd-config": "/etc/containerd/config.toml", "--containerd-socket": "/run/containerd/containerd.sock",
			"--containerd-binary": "containerd", "--containerd-restart-command": "systemctl restart containerd",
			"--shim-dir": "/host/usr/local/bin", "--host-root": "/host"} {
			chartWantArg(t, pc, flag, v)
		}
		for _, f := range []string{"--registry-mirror", "--insecure-registries", "--host-prefix"} {
			chartNoArg(t, pc, f)
		}
		// The API server address the kubelet injects, and the pod network.
		for _, c := range []corev1.Container{oc, pc} {
			for _, name := range chartAPIServerEnv {
				if v, ok := chartEnv(c, name); ok {
					t.Errorf("container %s: %s=%q without apiServer.host", c.Name, name, v)
				}
			}
		}
		if dps := ds.Spec.Template.Spec; dps.HostNetwork || dps.DNSPolicy != "" {
			t.Errorf("provisioner pod: hostNetwork %v dnsPolicy %q by default", dps.HostNetwork, dps.DNSPolicy)
		}
	})

	t.Run("apiServer endpoint", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, with("--set", "apiServer.host=192.0.2.10", "--set", "apiServer.port=6443")...)
		dep, ds := chartCheckCommon(t, rc, chartNS)
		want := map[string]string{"KUBERNETES_SERVICE_HOST": "192.0.2.10", "KUBERNETES_SERVICE_PORT": "6443"}
		for _, c := range []corev1.Container{dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0]} {
			for _, name := range chartAPIServerEnv {
				if v, ok := chartEnv(c, name); !ok || v != want[name] {
					t.Errorf("container %s: %s=%q (present %v), want %q", c.Name, name, v, ok, want[name])
				}
			}
		}
	})

	t.Run("provisioner hostNetwork", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, with("--set", "provisioner.hostNetwork=true")...)
		dep, ds := chartCheckCommon(t, rc, chartNS)
		if dps := ds.Spec.Template.Spec; !dps.HostNetwork || dps.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
			t.Errorf("provisioner pod: hostNetwork %v dnsPolicy %q, want true and %s", dps.HostNetwork, dps.DNSPolicy,
				corev1.DNSClusterFirstWithHostNet)
		}
		if ps := dep.Spec.Template.Spec; ps.HostNetwork || ps.DNSPolicy != "" {
			t.Errorf("operator pod: hostNetwork %v dnsPolicy %q with provisioner.hostNetwork", ps.HostNetwork, ps.DNSPolicy)
		}
	})

	t.Run("metrics enabled", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, with("--set", "metrics.enabled=true")...)
		dep, ds := chartCheckCommon(t, rc, chartNS)
		oc, pc := dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0]
		chartWantArg(t, oc, "--metrics-address", ":8080")
		chartWantArg(t, pc, "--metrics-address", ":9464")
		for _, s := range []struct {
			name     string
			port     int32
			headless bool
			selector map[string]string
		}{{"brewlet-operator-metrics", 8080, false, dep.Spec.Selector.MatchLabels},
			{"brewlet-provisioner-metrics", 9464, true, ds.Spec.Selector.MatchLabels}} {
			svc := &corev1.Service{}
			rc.decode(t, "Service", s.name, svc)
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != s.port || svc.Spec.Ports[0].TargetPort.String() != "metrics" ||
				(svc.Spec.ClusterIP == corev1.ClusterIPNone) != s.headless || !reflect.DeepEqual(svc.Spec.Selector, s.selector) {
				t.Errorf("Service %s: %+v", s.name, svc.Spec)
			}
		}
	})

	t.Run("admission disabled", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, with("--set", "admission.enabled=false")...)
		dep, _ := chartCheckCommon(t, rc, chartNS)
		oc := dep.Spec.Template.Spec.Containers[0]
		chartWantArg(t, oc, "--webhook-port", "0")
		chartNoArg(t, oc, "--webhook-cert-dir")
		if rc.has("MutatingWebhookConfiguration", admission.ConfigurationName) || rc.has("Service", admission.ServiceName) {
			t.Errorf("webhook chartObject with admission.enabled=false: %v", rc.names())
		}
		op, role := &rbacv1.ClusterRole{}, &rbacv1.Role{}
		rc.decode(t, "ClusterRole", "brewlet-operator", op)
		rc.decode(t, "Role", "brewlet-operator", role)
		if v, _ := chartRule(op.Rules, "admissionregistration.k8s.io", "mutatingwebhookconfigurations"); len(v) != 0 {
			t.Errorf("operator keeps webhook rights without admission: %v", v)
		}
		if v, _ := chartRule(role.Rules, "", "secrets"); len(v) != 0 {
			t.Errorf("operator keeps Secret rights without admission: %v", v)
		}
	})

	t.Run("digest wins over tag", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, with("--set", "operator.image.tag=v9", "--set", "operator.image.digest="+chartDigest,
			"--set", "provisioner.image.registry=127.0.0.1:5000", "--set", "provisioner.image.repository=brewlet/brewlet-provisioner",
			"--set", "provisioner.image.digest="+chartDigest, "--set", "operator.image.pullPolicy=Always")...)
		dep, ds := chartCheckCommon(t, rc, chartNS)
		oc, pc := dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0]
		if oc.Image != "ghcr.io/brewlet-sh/brewlet-operator@"+chartDigest || oc.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("operator image %q (%s): want the digest only", oc.Image, oc.ImagePullPolicy)
		}
		if pc.Image != "127.0.0.1:5000/brewlet/brewlet-provisioner@"+chartDigest {
			t.Errorf("provisioner image %q: want registry/repository@digest", pc.Image)
		}
		rc = chartMustRender(t, chartNS, with("--set", "operator.image.tag=v9")...)
		dep, _ = chartCheckCommon(t, rc, chartNS)
		if img := dep.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/brewlet-sh/brewlet-operator:v9" {
			t.Errorf("operator image %q: want the tag", img)
		}
	})

	t.Run("includeControlPlane and two pools", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, "--set-json", `provisioner.pools=[{"key":"pool","values":["a"]},{"key":"tier","values":["b"]}]`,
			"--set", "provisioner.includeControlPlane=true",
			"--set-json", `provisioner.tolerations=[{"key":"dedicated","operator":"Equal","value":"brewlet","effect":"NoSchedule"}]`)
		_, ds := chartCheckCommon(t, rc, chartNS)
		terms := ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		want := []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "tier", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
			// A node that left the pools keeps its agent until its host changes are reversed.
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "brewlet.sh/host-changes", Operator: corev1.NodeSelectorOpIn, Values: []string{"present"}}}},
		}
		if !equality.Semantic.DeepEqual(terms, want) {
			t.Errorf("terms %+v, want %+v", terms, want)
		}
		tol := ds.Spec.Template.Spec.Tolerations
		wantTol := []corev1.Toleration{
			{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "brewlet", Effect: corev1.TaintEffectNoSchedule},
		}
		if !equality.Semantic.DeepEqual(tol, wantTol) {
			t.Errorf("tolerations %+v, want %+v", tol, wantTol)
		}
	})

	t.Run("containerd socket next to its config: one mount", func(t *testing.T) {
		rc := chartMustRender(t, "other-ns", with("--set", "provisioner.containerd.config=/var/lib/node/containerd/config.toml",
			"--set", "provisioner.containerd.socket=/var/lib/node/containerd/containerd.sock")...)
		_, ds := chartCheckCommon(t, rc, "other-ns")
		seen := map[string]int{}
		for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
			seen[m.MountPath]++
		}
		if seen["/var/lib/node/containerd"] != 1 {
			t.Errorf("mounts of the shared containerd directory: %d, want 1 (mount paths must be unique)", seen["/var/lib/node/containerd"])
		}
	})

	t.Run("node settings", func(t *testing.T) {
		rc := chartMustRender(t, "other-ns", with(
			"--set", "provisioner.hostPrefix=/srv/test", "--set", "provisioner.gc.grace=10m", "--set", "provisioner.authorizationTTL=90s",
			"--set", "provisioner.containerd.restart=none", "--set", "provisioner.containerd.config=/etc/k8s/containerd/config.toml",
			"--set", "provisioner.containerd.socket=/run/k8s/containerd.sock", "--set", "provisioner.containerd.shimDir=",
			"--set", "provisioner.containerd.restartCommand=kill -HUP 1", "--set", "provisioner.containerd.runOnHost=false",
			"--set-json", `provisioner.registry.mirrors=[{"registry":"registry.example","mirrors":["m1:5000","m2.example"]}]`,
			"--set", "provisioner.registry.insecure=true", "--set", "provisioner.registry.credentialsSecret=pull",
			"--set-json", `imagePullSecrets=["regcred"]`)...)
		dep, ds := chartCheckCommon(t, rc, "other-ns")
		pc := ds.Spec.Template.Spec.Containers[0]
		for flag, v := range map[string]string{"--host-prefix": "/srv/test", "--gc-grace": "10m", "--authorization-ttl": "90s",
			"--containerd-restart": "none", "--containerd-config": "/etc/k8s/containerd/config.toml",
			"--containerd-socket": "/run/k8s/containerd.sock", "--containerd-restart-command": "kill -HUP 1", "--insecure-registries": ""} {
			chartWantArg(t, pc, flag, v)
		}
		chartNoArg(t, pc, "--shim-dir")
		chartNoArg(t, pc, "--host-root")
		var mirrors []string
		for _, a := range pc.Args {
			if v, ok := strings.CutPrefix(a, "--registry-mirror="); ok {
				mirrors = append(mirrors, v)
			}
		}
		if !slices.Equal(mirrors, []string{"registry.example=m1:5000", "registry.example=m2.example"}) {
			t.Errorf("mirror flags %v", mirrors)
		}
		hp := chartHostPaths(ds.Spec.Template.Spec)
		want := map[string]string{"/srv/test/opt/brewlet": "/srv/test/opt/brewlet", "/srv/test/var/lib/brewlet": "/srv/test/var/lib/brewlet",
			"/srv/test/run/brewlet": "/srv/test/run/brewlet", "/etc/k8s/containerd": "/etc/k8s/containerd", "/run/k8s": "/run/k8s"}
		if !reflect.DeepEqual(hp, want) {
			t.Errorf("host paths %v, want %v", hp, want)
		}
		dockerConfig, _ := chartEnv(pc, "DOCKER_CONFIG")
		var secretVol *corev1.SecretVolumeSource
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				secretVol = v.Secret
			}
		}
		if dockerConfig == "" || secretVol == nil || secretVol.SecretName != "pull" ||
			!reflect.DeepEqual(secretVol.Items, []corev1.KeyToPath{{Key: ".dockerconfigjson", Path: "config.json"}}) ||
			!slices.ContainsFunc(pc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dockerConfig }) {
			t.Errorf("registry credentials: DOCKER_CONFIG %q, volume %+v", dockerConfig, secretVol)
		}
		for _, ps := range []corev1.PodSpec{dep.Spec.Template.Spec, ds.Spec.Template.Spec} {
			if !reflect.DeepEqual(ps.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
				t.Errorf("imagePullSecrets %+v", ps.ImagePullSecrets)
			}
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		rc.decode(t, "MutatingWebhookConfiguration", admission.ConfigurationName, mwc)
		if s := mwc.Webhooks[0].ClientConfig.Service; s == nil || s.Namespace != "other-ns" {
			t.Errorf("webhook Service reference %+v does not follow the release namespace", s)
		}
	})

	t.Run("operator settings", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, with("--set", "operator.replicas=3", "--set", "operator.leaderElectionID=brewlet-lock",
			"--set", "admission.webhookPort=10250", "--set", "admission.certResync=30s",
			"--set-json", `operator.nodeSelector={"kubernetes.io/os":"linux"}`,
			"--set-json", `operator.tolerations=[{"key":"infra","operator":"Exists"}]`,
			"--set", "operator.priorityClassName=infra-critical", "--set", "provisioner.priorityClassName=system-node-critical",
			"--set", "operator.resources.limits.memory=1Gi", "--set", "provisioner.resources.requests.cpu=200m")...)
		dep, ds := chartCheckCommonWith(t, rc, chartNS, "brewlet-lock", 3)
		ps, oc := dep.Spec.Template.Spec, dep.Spec.Template.Spec.Containers[0]
		chartWantArg(t, oc, "--webhook-port", "10250")
		chartWantArg(t, oc, "--webhook-cert-resync", "30s")
		if !slices.ContainsFunc(oc.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" && p.ContainerPort == 10250 }) {
			t.Errorf("operator webhook port %+v", oc.Ports)
		}
		if !reflect.DeepEqual(ps.NodeSelector, map[string]string{"kubernetes.io/os": "linux"}) ||
			!reflect.DeepEqual(ps.Tolerations, []corev1.Toleration{{Key: "infra", Operator: corev1.TolerationOpExists}}) ||
			ps.PriorityClassName != "infra-critical" || ds.Spec.Template.Spec.PriorityClassName != "system-node-critical" {
			t.Errorf("operator placement %v %v %q, provisioner priority %q", ps.NodeSelector, ps.Tolerations, ps.PriorityClassName,
				ds.Spec.Template.Spec.PriorityClassName)
		}
		if m := oc.Resources.Limits.Memory().String(); m != "1Gi" {
			t.Errorf("operator memory limit %s", m)
		}
		if c := ds.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String(); c != "200m" {
			t.Errorf("provisioner cpu request %s", c)
		}
	})

	t.Run("no pools is refused", func(t *testing.T) {
		_, out, err := chartTemplate(t, chartNS)
		if err == nil || !strings.Contains(out, "provisioner.pools is empty") {
			t.Fatalf("helm template without pools: err %v, want the pools message\n%s", err, out)
		}
	})

	t.Run("provisioner disabled renders no node agent", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, "--set", "provisioner.enabled=false")
		for _, k := range [][2]string{{"DaemonSet", "brewlet-provisioner"}, {"ServiceAccount", "brewlet-provisioner"},
			{"ClusterRole", "brewlet-provisioner"}, {"ValidatingAdmissionPolicy", "brewlet-provisioner-node-scope"}} {
			if rc.has(k[0], k[1]) {
				t.Errorf("%s %s chartObject with provisioner.enabled=false", k[0], k[1])
			}
		}
		if !rc.has("Deployment", "brewlet-operator") {
			t.Errorf("operator missing: %v", rc.names())
		}
	})

	t.Run("rotation restarts off: no rights on workloads, no restarts policy", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, pools...)
		chartCheckCommon(t, rc, chartNS)
		if rights := chartWorkloadRights(t, rc); len(rights) != 0 {
			t.Errorf("rights on workloads or pods without rotation restarts: %v", rights)
		}
		for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
			if rc.has(kind, chartRestartsName) || rc.has(kind, chartRestartsName+"-barrier") {
				t.Errorf("%s %s rendered with rotation restarts off", kind, chartRestartsName)
			}
		}
		oc := rc.find("Deployment", "brewlet-operator")
		if oc == nil || strings.Contains(string(oc.JSON), "--rotation-restart") {
			t.Errorf("operator Deployment runs rotation restarts while they are off")
		}
	})

	t.Run("rotation restarts in every namespace: a ClusterRole and the policy", func(t *testing.T) {
		for _, ns := range []string{chartNS, "other-ns"} {
			rc := chartMustRender(t, ns, with(append(slices.Clone(chartRestartsArgs), "--set", "operator.rotationRestarts.maxConcurrent=7",
				"--set", "operator.rotationRestarts.progressDeadline=90s")...)...)
			dep, _ := chartCheckCommon(t, rc, ns)
			oc := dep.Spec.Template.Spec.Containers[0]
			chartWantArg(t, oc, "--rotation-restarts", "")
			chartWantArg(t, oc, "--rotation-restart-max-concurrent", "7")
			chartWantArg(t, oc, "--rotation-restart-progress-deadline", "90s")
			chartNoArg(t, oc, "--rotation-restart-namespaces")
			cr := &rbacv1.ClusterRole{}
			rc.decode(t, "ClusterRole", chartRestartsName, cr)
			chartWantRestartRules(t, "ClusterRole "+chartRestartsName, cr.Rules)
			crb := &rbacv1.ClusterRoleBinding{}
			rc.decode(t, "ClusterRoleBinding", chartRestartsName, crb)
			chartCheckBinding(t, "ClusterRoleBinding "+chartRestartsName, crb.RoleRef, crb.Subjects, "ClusterRole", chartRestartsName, ns)
			// These are the only rights on workloads and pods.
			rights := chartWorkloadRights(t, rc)
			if _, ok := rights["ClusterRole /"+chartRestartsName]; !ok || len(rights) != 1 {
				t.Errorf("rights on workloads: %v, want only ClusterRole %s", rights, chartRestartsName)
			}
			if rc.has("Role", chartRestartsName) || rc.has("RoleBinding", chartRestartsName) {
				t.Errorf("Roles for rotation restarts without namespaces: %v", rc.names())
			}
			chartCheckRestartPolicy(t, rc, ns)
		}
	})

	t.Run("rotation restarts in namespaces: a Role in each, nothing cluster-wide", func(t *testing.T) {
		rc := chartMustRender(t, chartNS, with(append(slices.Clone(chartRestartsArgs),
			"--set-json", `operator.rotationRestarts.namespaces=["a","b"]`)...)...)
		dep, _ := chartCheckCommon(t, rc, chartNS)
		chartWantArg(t, dep.Spec.Template.Spec.Containers[0], "--rotation-restart-namespaces", "a,b")
		want := map[string]bool{}
		for _, ns := range []string{"a", "b"} {
			role := &rbacv1.Role{}
			rc.decodeIn(t, "Role", ns, chartRestartsName, role)
			chartWantRestartRules(t, "Role "+ns+"/"+chartRestartsName, role.Rules)
			rb := &rbacv1.RoleBinding{}
			rc.decodeIn(t, "RoleBinding", ns, chartRestartsName, rb)
			chartCheckBinding(t, "RoleBinding "+ns+"/"+chartRestartsName, rb.RoleRef, rb.Subjects, "Role", chartRestartsName, chartNS)
			want["Role "+ns+"/"+chartRestartsName] = true
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
		if rc.has("ClusterRole", chartRestartsName) || rc.has("ClusterRoleBinding", chartRestartsName) {
			t.Errorf("cluster-wide restart rights with namespaces: %v", rc.names())
		}
		for _, r := range rc {
			if (r.Kind == "Role" || r.Kind == "RoleBinding") && r.Name == chartRestartsName && r.Namespace != "a" && r.Namespace != "b" {
				t.Errorf("%s %s in namespace %q", r.Kind, r.Name, r.Namespace)
			}
		}
		chartCheckRestartPolicy(t, rc, chartNS)
	})

	t.Run("rotation restarts and the admission policy API", func(t *testing.T) {
		vap := "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
		mwc := "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration"
		relaxed := "operator.rotationRestarts.requireAdmissionPolicy=false"
		// Required (the default), the chart refuses to render unless the API is announced:
		// helm template alone announces no kinds; a cluster without the API announces others.
		for _, kinds := range [][]string{nil, {"--api-versions", mwc}} {
			_, out, err := chartTemplateRaw(t, chartNS, with(append(slices.Clone(chartRestartsArgs), kinds...)...)...)
			if err == nil || !strings.Contains(out, "does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy") ||
				!strings.Contains(out, "requireAdmissionPolicy=false") || !strings.Contains(out, "--api-versions") {
				t.Errorf("restarts without the policy API (kinds %v): err %v, want the chart's refusal\n%s", kinds, err, out)
			}
		}
		rc, out, err := chartTemplateRaw(t, chartNS, with(append(slices.Clone(chartRestartsArgs), "--api-versions", vap)...)...)
		if err != nil {
			t.Fatalf("restarts with the policy API announced: %v\n%s", err, out)
		}
		chartCheckRestartPolicy(t, rc, chartNS)
		// Not required: RBAC alone where the API is known to be missing, the policy
		// wherever it exists or cannot be known (helm template alone).
		for _, c := range []struct {
			kinds  []string
			policy bool
		}{{[]string{"--api-versions", mwc}, false}, {[]string{"--api-versions", mwc, "--api-versions", vap}, true}, {nil, true}} {
			rc, out, err := chartTemplateRaw(t, chartNS, with(append(slices.Clone(chartRestartsArgs), append([]string{"--set", relaxed}, c.kinds...)...)...)...)
			if err != nil {
				t.Errorf("requireAdmissionPolicy=false, kinds %v: %v\n%s", c.kinds, err, out)
				continue
			}
			if !rc.has("ClusterRole", chartRestartsName) {
				t.Errorf("requireAdmissionPolicy=false, kinds %v: no restart rights: %v", c.kinds, rc.names())
			}
			if rc.has("ValidatingAdmissionPolicy", chartRestartsName) != c.policy || rc.has("ValidatingAdmissionPolicyBinding", chartRestartsName) != c.policy {
				t.Errorf("requireAdmissionPolicy=false, kinds %v: policy rendered %v, want %v", c.kinds,
					rc.has("ValidatingAdmissionPolicy", chartRestartsName), c.policy)
			}
		}
	})

	t.Run("schema refuses invalid values", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{with("--set", "provisioner.containerd.restart=always"), "/provisioner/containerd/restart'"},
			{with("--set", "operator.replicass=3"), "replicass"},
			{with("--set", "operator.image.digest=sha256:abc"), "/operator/image/digest'"},
			{with("--set", "metrics.enabled=yes"), "/metrics/enabled'"},
			{with("--set", "provisioner.gc.grace=1 hour"), "/provisioner/gc/grace'"},
			{with("--set", "apiServer.host=https://x"), "/apiServer/host'"},
			{with("--set", "apiServer.host=192.0.2.10:6443"), "/apiServer/host'"},
			{with("--set", "apiServer.port=0"), "/apiServer/port'"},
			{[]string{"--set-json", `provisioner.pools=[{"key":"pool","values":[]}]`}, "values"},
			{[]string{"--set-json", `provisioner.pools=[{"key":"pool","names":["a"]}]`}, "names"},
			{with("--set", "operator.rotationRestarts.maxConcurrent=0"), "/operator/rotationRestarts/maxConcurrent'"},
			{with("--set", "operator.rotationRestarts.maxConcurrent=101"), "/operator/rotationRestarts/maxConcurrent'"},
			{with("--set", "operator.rotationRestarts.progressDeadline=10 minutes"), "/operator/rotationRestarts/progressDeadline'"},
			{with("--set", "operator.rotationRestarts.progressDeadline=10"), "/operator/rotationRestarts/progressDeadline'"},
			{with("--set", "operator.rotationRestarts.enabled=on"), "/operator/rotationRestarts/enabled'"},
			{with("--set-json", `operator.rotationRestarts.namespaces=["Apps_Prod"]`), "/operator/rotationRestarts/namespaces/0'"},
			{with("--set-json", `operator.rotationRestarts.namespaces=["a","a"]`), "/operator/rotationRestarts/namespaces'"},
			{with("--set-json", `operator.rotationRestarts.namespaces=["apps","kube-system"]`), "/operator/rotationRestarts/namespaces/1'"},
			{with("--set", "operator.rotationRestarts.namespace=apps"), "namespace"},
		} {
			_, out, err := chartTemplate(t, chartNS, c.args...)
			if err == nil || !strings.Contains(out, "values don't meet the specifications of the schema") || !strings.Contains(out, c.want) {
				t.Errorf("helm template %v: err %v, want a schema refusal naming %q\n%s", c.args, err, c.want, out)
			}
		}
	})
}

// The rendered chart goes through a real API server: every object validated by
// server-side dry-run (CRDs installed first), then installed and upgraded by helm, the
// chart's provisioner RBAC with its node-scope policy judged for a token bound to a pod on
// node n1, and the operator run under the chart's operator RBAC.
func TestChartOnAPIServer(t *testing.T) {
	framework.Tool(t, "helm")
	cp := framework.StartControlPlane(t, framework.ControlPlaneOptions{SkipCRDs: true})
	ctx, c := context.Background(), cp.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := cp.Kubectl(t, args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return out
	}
	// CRDs first (helm installs crds/ before the templates), then the rest in the release
	// namespace.
	kubectl("apply", "--server-side", "-f", filepath.Join(chartDir(t), "crds"))
	kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNS}}))

	dir := t.TempDir()
	for name, args := range map[string][]string{
		"default.yaml": {"--set-json", "provisioner.pools=" + chartPool},
		"all.yaml": {"--set-json", "provisioner.pools=" + chartPool, "--set", "metrics.enabled=true",
			"--set", "provisioner.includeControlPlane=true", "--set", "provisioner.registry.credentialsSecret=pull",
			"--set-json", `provisioner.registry.mirrors=[{"registry":"registry.example","mirrors":["m1:5000"]}]`,
			"--set", "operator.image.digest=" + chartDigest},
		"no-admission.yaml": {"--set-json", "provisioner.pools=" + chartPool, "--set", "admission.enabled=false"},
	} {
		rc, out, err := chartTemplate(t, chartNS, args...)
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, out)
		}
		p := filepath.Join(dir, name)
		must(os.WriteFile(p, []byte(out), 0o600))
		got := kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", p)
		if n := strings.Count(got, "(server dry run)"); n != len(rc) {
			t.Errorf("%s: %d of %d objects validated by dry run:\n%s", name, n, len(rc), got)
		}
	}
	// Installed for real by helm itself (no controller-manager runs: the workloads stay
	// objects). The CRDs are there already; helm leaves existing CRDs alone.
	helmHome := t.TempDir()
	helm := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(framework.Tool(t, "helm"), append(args, "--kubeconfig", cp.Kubeconfig)...)
		cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"),
			"HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"), "HELM_DATA_HOME="+filepath.Join(helmHome, "data"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	helm("install", "brewlet", chartDir(t), "--namespace", chartNS, "--set-json", "provisioner.pools="+chartPool)

	const ns, sa = chartNS, "brewlet-provisioner"
	for _, n := range []string{"n1", "n2"} {
		must(c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"pool.example/name": "general"}}}))
	}
	must(c.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}))
	agent := nodeBoundClient(t, cp, ns, sa, "n1")
	waitNodeScopeDenies(t, agent, "n2")
	// What the agent does on its own node, with the chart's RBAC: read the cluster's
	// profiles and images, create its NodeRuntime, report status, label its node, hold its
	// writer Lease.
	var profiles brewletv1.NodeProfileList
	must(agent.List(ctx, &profiles))
	var ris brewletv1.RuntimeImageList
	must(agent.List(ctx, &ris))
	ctrl := true
	n1 := &corev1.Node{}
	must(agent.Get(ctx, client.ObjectKey{Name: "n1"}, n1))
	expectDenied(t, agent.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: brewletv1.NodeRuntimeSpec{Runtimes: []brewletv1.RuntimeDirective{{ID: "python-3.12", Install: "Eager", AllowedGeneration: 1}}}}),
		"only with an empty spec")
	if err := agent.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: n1.UID, Controller: &ctrl}}}}); err != nil {
		t.Fatalf("agent could not create its own NodeRuntime: %v", err)
	}
	if err := writeStatus(ctx, agent, "n1"); err != nil {
		t.Fatalf("agent could not write its own NodeRuntime status: %v", err)
	}
	for _, key := range []string{vocab.LabelRuntime, vocab.RuntimeLabel("python-3.12"), vocab.LabelHostChanges} {
		if err := labelNode(ctx, agent, "n1", key, "ready"); err != nil {
			t.Fatalf("agent could not set %s on its own node: %v", key, err)
		}
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-provisioner-n1", Namespace: ns}}
	if err := agent.Create(ctx, lease); err != nil {
		t.Fatalf("agent could not create its writer Lease: %v", err)
	}
	holder := "agent-n1"
	lease.Spec.HolderIdentity = &holder
	if err := agent.Update(ctx, lease); err != nil {
		t.Fatalf("agent could not renew its writer Lease: %v", err)
	}
	// ... and what it may not do.
	expectDenied(t, labelNode(ctx, agent, "n2", vocab.RuntimeLabel("python-3.12"), "ready"), "agents write only their own node")
	expectDenied(t, labelNode(ctx, agent, "n1", "pool.example/name", "gpu"), "only Brewlet's labels")
	expectDenied(t, labelNode(ctx, agent, "n1", "node-restriction.kubernetes.io/other", "x"), "only Brewlet's labels")
	expectDenied(t, agent.Create(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n3"}}), "agents write only their own node")
	if err := agent.Delete(ctx, &brewletv1.NodeRuntime{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}); !apierrors.IsForbidden(err) {
		t.Errorf("agent deleting a NodeRuntime: %v, want forbidden (no delete right)", err)
	}
	if err := agent.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Errorf("agent listing Secrets: %v, want forbidden", err)
	}
	if err := agent.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}}); !apierrors.IsForbidden(err) {
		t.Errorf("agent creating a Lease outside its namespace: %v, want forbidden", err)
	}
	// One step beyond its own Lease: another node's (taking it would stop that node's
	// authorizations), the operator's leader Lease (no controller would run again), any
	// other name; and the spec of its own NodeRuntime (the operator's).
	expectDenied(t, agent.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-provisioner-n2", Namespace: ns}}),
		"agents write only their own node (brewlet-provisioner-n1)")
	expectDenied(t, agent.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns}}),
		"agents write only their own node (brewlet-provisioner-n1)")
	opLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-operator", Namespace: ns}}
	must(c.Create(ctx, opLease))
	var stolen coordinationv1.Lease
	must(agent.Get(ctx, client.ObjectKeyFromObject(opLease), &stolen))
	thief := "agent-n1"
	stolen.Spec.HolderIdentity = &thief
	expectDenied(t, agent.Update(ctx, &stolen), "agents write only their own node (brewlet-provisioner-n1)")
	if err := agent.Delete(ctx, &stolen); !apierrors.IsForbidden(err) {
		t.Errorf("agent deleting the operator's leader Lease: %v, want forbidden (RBAC grants no delete of Leases)", err)
	}
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brewlet-provisioner-n2", Namespace: ns}}
	must(c.Create(ctx, other))
	must(agent.Get(ctx, client.ObjectKeyFromObject(other), other))
	other.Spec.HolderIdentity = &thief
	expectDenied(t, agent.Update(ctx, other), "agents write only their own node (brewlet-provisioner-n1)")
	var own brewletv1.NodeRuntime
	must(agent.Get(ctx, client.ObjectKey{Name: "n1"}, &own))
	own.Spec.Runtimes = []brewletv1.RuntimeDirective{{ID: "python-3.12", Install: "Eager", Quarantine: true}}
	if err := agent.Update(ctx, &own); !apierrors.IsForbidden(err) {
		t.Errorf("agent updating its own NodeRuntime's spec: %v, want forbidden (RBAC grants no update of noderuntimes)", err)
	}
	// A token of the same service account without the pod binding has no node claim.
	expectDenied(t, writeStatus(ctx, saClient(t, cp.Config, ns, sa, nil), "n1"), "no node claim")

	t.Run("operator runs under the chart's RBAC", func(t *testing.T) { chartOperatorUnderRBAC(t, cp) })

	// An upgrade keeps the caBundle the operator wrote into its webhook configuration (the
	// chart leaves the field out, so helm's three-way merge does not touch it).
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	must(c.Get(ctx, client.ObjectKey{Name: admission.ConfigurationName}, mwc))
	ca := []byte("-----BEGIN CERTIFICATE-----\nbrewlet test\n-----END CERTIFICATE-----\n")
	mwc.Webhooks[0].ClientConfig.CABundle = ca
	must(c.Update(ctx, mwc))
	helm("upgrade", "brewlet", chartDir(t), "--namespace", chartNS, "--set-json", "provisioner.pools="+chartPool, "--set", "metrics.enabled=true")
	must(c.Get(ctx, client.ObjectKey{Name: admission.ConfigurationName}, mwc))
	if !bytes.Equal(mwc.Webhooks[0].ClientConfig.CABundle, ca) {
		t.Errorf("helm upgrade reset the webhook caBundle to %q", mwc.Webhooks[0].ClientConfig.CABundle)
	}
	must(c.Get(ctx, client.ObjectKey{Namespace: chartNS, Name: "brewlet-provisioner-metrics"}, &corev1.Service{}))

	// The operator's rights, asked of the API server's authorizer.
	asOp := "--as=system:serviceaccount:" + ns + ":brewlet-operator"
	for _, q := range []struct {
		args []string
		want string
	}{
		{[]string{"update", "runtimeimages.node.brewlet.sh", "--subresource=status"}, "yes"},
		{[]string{"update", "nodeprofiles.node.brewlet.sh", "--subresource=status"}, "yes"},
		{[]string{"create", "noderuntimes.node.brewlet.sh"}, "yes"},
		{[]string{"update", "noderuntimes.node.brewlet.sh", "--subresource=status"}, "no"},
		{[]string{"update", "runtimeimages.node.brewlet.sh", "--subresource=finalizers"}, "yes"},
		{[]string{"delete", "runtimeimages.node.brewlet.sh"}, "no"},
		{[]string{"patch", "nodes"}, "no"},
		{[]string{"delete", "runtimeclasses.node.k8s.io/brewlet"}, "yes"},
		{[]string{"delete", "runtimeclasses.node.k8s.io/kata"}, "no"},
		{[]string{"update", "mutatingwebhookconfigurations/" + admission.ConfigurationName}, "yes"},
		{[]string{"update", "mutatingwebhookconfigurations/other"}, "no"},
		{[]string{"get", "secrets/" + admission.SecretName, "-n", ns}, "yes"},
		{[]string{"get", "secrets/other", "-n", ns}, "no"},
		{[]string{"list", "secrets", "-n", ns}, "no"},
		{[]string{"get", "secrets/" + admission.SecretName, "-n", "default"}, "no"},
		{[]string{"update", "leases/brewlet-operator", "-n", ns}, "yes"},
		{[]string{"update", "leases/brewlet-provisioner-n1", "-n", ns}, "no"},
		{[]string{"watch", "leases", "-n", ns}, "yes"},
		{[]string{"list", "leases", "-n", "default"}, "no"},
		{[]string{"create", "events.events.k8s.io", "-n", "default"}, "yes"},
	} {
		// The answer is the last line (kubectl warns about cluster-scoped resources first).
		out, _ := cp.Kubectl(t, append([]string{"auth", "can-i", asOp}, q.args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := strings.TrimSpace(lines[len(lines)-1]); got != q.want {
			t.Errorf("operator can-i %v: %q, want %q", q.args, got, q.want)
		}
	}
	t.Run("the operator's token one step beyond its job", func(t *testing.T) { chartOperatorAttacks(t, cp) })
	t.Run("only RuntimeClass brewlet uses handler brewlet", func(t *testing.T) { chartRuntimeClassAliases(t, cp) })
	t.Run("a kubelet's credentials one step beyond its job", func(t *testing.T) { chartKubeletAttacks(t, cp) })
	t.Run("a tenant one step beyond its namespace", func(t *testing.T) { chartTenantAttacks(t, cp) })
}

// chartOperatorUnderRBAC runs the brewlet-operator binary as its own process (the flags
// of the chart's Deployment, loopback ports) whose only credential is a token of the
// chart's operator service account, and waits for what each of its controllers writes: so
// every verb the operator uses is proven granted, not only listed.
func chartOperatorUnderRBAC(t *testing.T, cp *framework.ControlPlane) {
	ctx, c := context.Background(), cp.Client
	// Ready: informers synced and the pod admission certificate (its Secret, by name)
	// loaded.
	op := startOperatorProcess(t, cp, operatorSAToken(t, cp), chartNS)
	defer op.stop(t, 30*time.Second)
	wait := func(what string, cond func() (bool, string)) {
		t.Helper()
		deadline, last := time.Now().Add(60*time.Second), ""
		for time.Now().Before(deadline) {
			ok, state := cond()
			if ok {
				return
			}
			last = state
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s not reached within 60s under the chart's operator RBAC; last seen: %s", what, last)
	}

	ri := runtimeImage("python-3.12", "registry.example/runtimes/python@"+goodDigest)
	if err := c.Create(ctx, ri); err != nil {
		t.Fatal(err)
	}
	np := &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: brewletv1.NodeProfileSpec{
		NodePool:      brewletv1.NodePool{Key: "pool.example/name", Names: []string{"general"}},
		RuntimeImages: []brewletv1.OfferedRuntime{{ID: "python-3.12"}}}}
	if err := c.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	// Leader Lease (Role, by name).
	wait("the leader Lease", func() (bool, string) {
		l := &coordinationv1.Lease{}
		err := c.Get(ctx, client.ObjectKey{Namespace: chartNS, Name: "brewlet-operator"}, l)
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", fmt.Sprint(err)
	})
	// RuntimeImage: finalizer (update) and status.
	wait("RuntimeImage generation 1 with its finalizer", func() (bool, string) {
		got := &brewletv1.RuntimeImage{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(ri), got); err != nil {
			return false, err.Error()
		}
		return got.Status.Generation == 1 && len(got.Finalizers) > 0, fmt.Sprintf("%+v %v", got.Status, got.Finalizers)
	})
	// NodeProfile status, NodeRuntime spec (create for n1, whose agent never ran; update
	// for n2, created earlier), RuntimeClass.
	wait("NodeProfile status and NodeRuntime specs", func() (bool, string) {
		got := &brewletv1.NodeProfile{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(np), got); err != nil {
			return false, err.Error()
		}
		for _, n := range []string{"n1", "n2"} {
			nrt := &brewletv1.NodeRuntime{}
			if err := c.Get(ctx, client.ObjectKey{Name: n}, nrt); err != nil || len(nrt.Spec.Runtimes) == 0 {
				return false, fmt.Sprintf("NodeRuntime %s: %v %+v", n, err, nrt.Spec)
			}
		}
		return got.Status.AssignedNodes == 2, fmt.Sprintf("%+v", got.Status)
	})
	wait("RuntimeClass brewlet", func() (bool, string) {
		rc := &nodev1.RuntimeClass{}
		err := c.Get(ctx, client.ObjectKey{Name: "brewlet"}, rc)
		return err == nil && rc.Handler == "brewlet", fmt.Sprint(err)
	})
	// Pod admission: the certificate Secret (Role, by name) and the caBundle (ClusterRole,
	// by name).
	wait("the webhook certificate and caBundle", func() (bool, string) {
		sec := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: chartNS, Name: admission.SecretName}, sec); err != nil {
			return false, err.Error()
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: admission.ConfigurationName}, mwc); err != nil {
			return false, err.Error()
		}
		ca := mwc.Webhooks[0].ClientConfig.CABundle
		if len(ca) == 0 || !bytes.Equal(ca, sec.Data["ca.crt"]) {
			return false, fmt.Sprintf("caBundle %d bytes", len(ca))
		}
		// ... and the process serves the Secret's certificate, for the Service's name.
		err := op.webhookServes(ca, admission.ServiceName+"."+chartNS+".svc")
		return err == nil, fmt.Sprintf("webhook at %s: %v", op.WebhookAddr, err)
	})
	// The Secret the serving process reads holds no key that can sign for the webhook.
	if problem, err := admissionSecretProblem(ctx, c, nil); err != nil || problem != "" {
		t.Errorf("the webhook certificate Secret written under the chart's RBAC: %s %v", problem, err)
	}
	if err := framework.HTTPOK(ctx, http.DefaultClient, "http://"+op.MetricsAddr+"/metrics"); err != nil {
		t.Errorf("operator metrics: %v", err)
	}
	// The finalizer is released on deletion (update of the object, a fresh list of
	// NodeRuntimes): no node reports the epoch.
	if err := c.Delete(ctx, ri); err != nil {
		t.Fatal(err)
	}
	wait("RuntimeImage deleted", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(ri), &brewletv1.RuntimeImage{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
