package chart

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

// What every render holds whatever its values, asserted once here so that each value
// combination's test checks only what its values change; and the readers of containers,
// roles and mounts that the chart's checks share.

// chartCheckCommon asserts what every render with pools has, whatever the toggles.
func chartCheckCommon(t *testing.T, rc kit.ChartObjects, ns string) (*appsv1.Deployment, *appsv1.DaemonSet) {
	t.Helper()
	return chartCheckCommonWith(t, rc, ns, "brewlet-operator", 2)
}

func chartCheckCommonWith(t *testing.T, rc kit.ChartObjects, ns, leaseName string, replicas int32) (*appsv1.Deployment, *appsv1.DaemonSet) {
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
			if (r.Kind == "Role" || r.Kind == "RoleBinding") && r.Name == kit.ChartRestartsName {
				continue
			}
			if r.Namespace != ns {
				t.Errorf("%s %s in namespace %q, want the release namespace %q", r.Kind, r.Name, r.Namespace, ns)
			}
		}
	}
	dep := &appsv1.Deployment{}
	rc.Decode(t, "Deployment", "brewlet-operator", dep)
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
	rc.Decode(t, "ClusterRole", "brewlet-operator", op)
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
	rc.Decode(t, "Role", "brewlet-operator", opRole)
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
				rc.Decode(t, kind, n, b)
				subjects, ref = b.Subjects, b.RoleRef
			} else {
				b := &rbacv1.ClusterRoleBinding{}
				rc.Decode(t, kind, n, b)
				subjects, ref = b.Subjects, b.RoleRef
			}
			if ref.Name != n || len(subjects) != 1 || subjects[0].Name != n || subjects[0].Namespace != ns || subjects[0].Kind != "ServiceAccount" {
				t.Errorf("%s %s binds %+v to %+v", kind, n, ref, subjects)
			}
		}
	}
	pr := &rbacv1.ClusterRole{}
	rc.Decode(t, "ClusterRole", "brewlet-provisioner", pr)
	chartWantVerbs(t, "provisioner", pr.Rules, "", "nodes", "get", "list", "watch", "patch", "update")
	chartWantVerbs(t, "provisioner", pr.Rules, "node.brewlet.sh", "noderuntimes", "get", "list", "watch", "create")
	chartWantVerbs(t, "provisioner", pr.Rules, "node.brewlet.sh", "noderuntimes/status", "get", "update", "patch")
	chartWantVerbs(t, "provisioner", pr.Rules, "node.brewlet.sh", "nodeprofiles", "get", "list", "watch")
	chartWantVerbs(t, "provisioner", pr.Rules, "node.brewlet.sh", "runtimeimages", "get", "list", "watch")
	chartWantVerbs(t, "provisioner", pr.Rules, "", "secrets")
	prRole := &rbacv1.Role{}
	rc.Decode(t, "Role", "brewlet-provisioner", prRole)
	chartWantVerbs(t, "provisioner", prRole.Rules, "coordination.k8s.io", "leases", "get", "create", "update")

	// The node-scope policy is config/policy's with this release's service account.
	wantVAP, wantBinding := chartPolicyFromConfig(t, "provisioner-node-scope.yaml", "brewlet-provisioner-node-scope")
	wantVAP.Spec.MatchConditions[0].Expression = "request.userInfo.username == 'system:serviceaccount:" + ns + ":brewlet-provisioner'"
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	rc.Decode(t, "ValidatingAdmissionPolicy", "brewlet-provisioner-node-scope", vap)
	if !equality.Semantic.DeepEqual(vap.Spec, wantVAP.Spec) {
		t.Errorf("chart's node-scope policy differs from config/policy:\n got %+v\nwant %+v", vap.Spec, wantVAP.Spec)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	rc.Decode(t, "ValidatingAdmissionPolicyBinding", "brewlet-provisioner-node-scope", binding)
	if !equality.Semantic.DeepEqual(binding.Spec, wantBinding.Spec) {
		t.Errorf("policy binding %+v, want %+v", binding.Spec, wantBinding.Spec)
	}

	ds := &appsv1.DaemonSet{}
	rc.Decode(t, "DaemonSet", "brewlet-provisioner", ds)
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
