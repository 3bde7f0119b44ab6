package chart

import (
	"reflect"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/kit"
)

// TestChartTemplate renders every value combination that changes a template. Each subtest
// is a function so that a behaviour's renders can live in its own file (chart_values,
// chart_restarts); the order here is the order they run in.
func TestChartTemplate(t *testing.T) {
	framework.Tool(t, "helm")
	t.Run("defaults with pools", chartTemplateDefaults)
	t.Run("apiServer endpoint", chartTemplateAPIServer)
	t.Run("provisioner hostNetwork", chartTemplateHostNetwork)
	t.Run("metrics enabled", chartTemplateMetrics)
	t.Run("admission disabled", chartTemplateNoAdmission)
	t.Run("digest wins over tag", chartTemplateDigest)
	t.Run("includeControlPlane and two pools", chartTemplatePlacement)
	t.Run("containerd socket next to its config: one mount", chartTemplateSharedContainerdDir)
	t.Run("node settings", chartTemplateNodeSettings)
	t.Run("operator settings", chartTemplateOperatorSettings)
	t.Run("no pools is refused", chartTemplateNoPools)
	t.Run("keyless identities without a trusted root are refused", chartTemplateKeylessWithoutRoot)
	t.Run("a containerd template outside the config's directory is refused", chartTemplateTemplateOutsideConfigDir)
	t.Run("startup taints", chartTemplateStartupTaints)
	t.Run("provisioner disabled renders no node agent", chartTemplateNoProvisioner)
	t.Run("rotation restarts off: no rights on workloads, no restarts policy", chartRestartsOff)
	t.Run("rotation restarts in every namespace: a ClusterRole and the policy", chartRestartsEveryNamespace)
	t.Run("rotation restarts in namespaces: a Role in each, nothing cluster-wide", chartRestartsInNamespaces)
	t.Run("rotation restarts and the admission policy API", chartRestartsPolicyAPI)
	t.Run("rotation restart window", chartRestartsWindow)
	t.Run("schema refuses invalid values", chartTemplateSchema)
}

func chartTemplateDefaults(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools()...)
	dep, ds := chartCheckCommon(t, rc, kit.ChartNS)
	oc, pc := dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0]
	if oc.Image != "ghcr.io/brewlet-sh/brewlet-operator:0.1.0" || pc.Image != "ghcr.io/brewlet-sh/brewlet-provisioner:0.1.0" {
		t.Errorf("images %q %q: want the appVersion tag", oc.Image, pc.Image)
	}
	// Metrics are opt-in.
	chartWantArg(t, oc, "--metrics-address", "0")
	chartNoArg(t, pc, "--metrics-address")
	if rc.Has("Service", "brewlet-operator-metrics") || rc.Has("Service", "brewlet-provisioner-metrics") {
		t.Errorf("metrics Services chartObject with metrics.enabled=false")
	}
	// Pod admission is on: the same webhook the operator's code describes.
	chartWantArg(t, oc, "--webhook-port", "9443")
	chartWantArg(t, oc, "--webhook-cert-dir", "/var/run/brewlet/webhook-certs")
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	rc.Decode(t, "MutatingWebhookConfiguration", admission.ConfigurationName, mwc)
	want := admission.Configuration(admission.ClientConfig{ServiceNamespace: kit.ChartNS, ServiceName: admission.ServiceName, ServicePort: 443})
	if !equality.Semantic.DeepEqual(mwc.Webhooks, want.Webhooks) {
		t.Errorf("chart webhook differs from admission.Configuration:\n got %+v\nwant %+v", mwc.Webhooks, want.Webhooks)
	}
	svc := &corev1.Service{}
	rc.Decode(t, "Service", admission.ServiceName, svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "webhook" ||
		!reflect.DeepEqual(svc.Spec.Selector, dep.Spec.Selector.MatchLabels) {
		t.Errorf("webhook Service %+v does not route 443 to the operator's webhook port", svc.Spec)
	}
	if !slices.ContainsFunc(oc.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" && p.ContainerPort == 9443 }) {
		t.Errorf("operator has no webhook port 9443: %+v", oc.Ports)
	}
	op, role := &rbacv1.ClusterRole{}, &rbacv1.Role{}
	rc.Decode(t, "ClusterRole", "brewlet-operator", op)
	rc.Decode(t, "Role", "brewlet-operator", role)
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
		{Key: "node-restriction.kubernetes.io/pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"general", "batch"}},
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.NodeSelectorOpDoesNotExist},
	}}, {MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: vocab.LabelHostChanges, Operator: corev1.NodeSelectorOpIn, Values: []string{"present"}},
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.NodeSelectorOpDoesNotExist},
	}}}
	if got := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; !equality.Semantic.DeepEqual(got, wantTerms) {
		t.Errorf("provisioner node affinity %+v, want %+v", got, wantTerms)
	}
	// Only the startup taint it removes itself (docs/install.md "Autoscalers").
	if tol := ds.Spec.Template.Spec.Tolerations; len(tol) != 1 || tol[0] != (corev1.Toleration{Key: vocab.TaintRuntimeNotReady, Operator: corev1.TolerationOpExists}) {
		t.Errorf("provisioner tolerates %+v by default", tol)
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
		"--shim-dir": "/host/usr/local/bin", "--host-root": "/host", "--registry-hosts-dir": "/etc/containerd/certs.d"} {
		chartWantArg(t, pc, flag, v)
	}
	for _, f := range []string{"--registry-mirror", "--insecure-registries", "--host-prefix", "--registry-ca-file", "--image-credential-provider-config", "--signature-keys"} {
		chartNoArg(t, pc, f)
	}
	for _, f := range []string{"--insecure-registries", "--registry-ca-file", "--signature-keys", "--signature-trusted-root"} {
		chartNoArg(t, oc, f)
	}
	chartNoArg(t, pc, "--signature-trusted-root")
	if rc.Has("ConfigMap", "brewlet-signature-keys") {
		t.Error("a signature keys ConfigMap without verification.publicKeys")
	}
	for _, c := range []corev1.Container{oc, pc} {
		for _, name := range []string{"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"} {
			if v, ok := chartEnv(c, name); ok {
				t.Errorf("container %s: %s=%q without proxy values", c.Name, name, v)
			}
		}
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
}

func chartTemplateAPIServer(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "apiServer.host=192.0.2.10", "--set", "apiServer.port=6443")...)
	dep, ds := chartCheckCommon(t, rc, kit.ChartNS)
	want := map[string]string{"KUBERNETES_SERVICE_HOST": "192.0.2.10", "KUBERNETES_SERVICE_PORT": "6443"}
	for _, c := range []corev1.Container{dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0]} {
		for _, name := range chartAPIServerEnv {
			if v, ok := chartEnv(c, name); !ok || v != want[name] {
				t.Errorf("container %s: %s=%q (present %v), want %q", c.Name, name, v, ok, want[name])
			}
		}
	}
}

func chartTemplateHostNetwork(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "provisioner.hostNetwork=true")...)
	dep, ds := chartCheckCommon(t, rc, kit.ChartNS)
	if dps := ds.Spec.Template.Spec; !dps.HostNetwork || dps.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("provisioner pod: hostNetwork %v dnsPolicy %q, want true and %s", dps.HostNetwork, dps.DNSPolicy,
			corev1.DNSClusterFirstWithHostNet)
	}
	if ps := dep.Spec.Template.Spec; ps.HostNetwork || ps.DNSPolicy != "" {
		t.Errorf("operator pod: hostNetwork %v dnsPolicy %q with provisioner.hostNetwork", ps.HostNetwork, ps.DNSPolicy)
	}
}

func chartTemplateMetrics(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "metrics.enabled=true")...)
	dep, ds := chartCheckCommon(t, rc, kit.ChartNS)
	oc, pc := dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0]
	chartWantArg(t, oc, "--metrics-address", ":8080")
	chartWantArg(t, pc, "--metrics-address", ":9464")
	// Both check their scrapers with the API server; scrapers are bound to the reader role.
	for _, name := range []string{"brewlet-operator", "brewlet-provisioner"} {
		role := &rbacv1.ClusterRole{}
		rc.Decode(t, "ClusterRole", name, role)
		chartWantVerbs(t, name, role.Rules, "authentication.k8s.io", "tokenreviews", "create")
		chartWantVerbs(t, name, role.Rules, "authorization.k8s.io", "subjectaccessreviews", "create")
	}
	reader := &rbacv1.ClusterRole{}
	rc.Decode(t, "ClusterRole", "brewlet-metrics-reader", reader)
	if len(reader.Rules) != 1 || !slices.Equal(reader.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(reader.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("brewlet-metrics-reader rules %+v, want get /metrics only", reader.Rules)
	}
	for _, s := range []struct {
		name     string
		port     int32
		headless bool
		selector map[string]string
	}{{"brewlet-operator-metrics", 8080, false, dep.Spec.Selector.MatchLabels},
		{"brewlet-provisioner-metrics", 9464, true, ds.Spec.Selector.MatchLabels}} {
		svc := &corev1.Service{}
		rc.Decode(t, "Service", s.name, svc)
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != s.port || svc.Spec.Ports[0].TargetPort.String() != "metrics" ||
			(svc.Spec.ClusterIP == corev1.ClusterIPNone) != s.headless || !reflect.DeepEqual(svc.Spec.Selector, s.selector) {
			t.Errorf("Service %s: %+v", s.name, svc.Spec)
		}
	}
}

func chartTemplateNoAdmission(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "admission.enabled=false")...)
	dep, _ := chartCheckCommon(t, rc, kit.ChartNS)
	oc := dep.Spec.Template.Spec.Containers[0]
	chartWantArg(t, oc, "--webhook-port", "0")
	chartNoArg(t, oc, "--webhook-cert-dir")
	if rc.Has("MutatingWebhookConfiguration", admission.ConfigurationName) || rc.Has("Service", admission.ServiceName) {
		t.Errorf("webhook chartObject with admission.enabled=false: %v", rc.Names())
	}
	op, role := &rbacv1.ClusterRole{}, &rbacv1.Role{}
	rc.Decode(t, "ClusterRole", "brewlet-operator", op)
	rc.Decode(t, "Role", "brewlet-operator", role)
	if v, _ := chartRule(op.Rules, "admissionregistration.k8s.io", "mutatingwebhookconfigurations"); len(v) != 0 {
		t.Errorf("operator keeps webhook rights without admission: %v", v)
	}
	if v, _ := chartRule(role.Rules, "", "secrets"); len(v) != 0 {
		t.Errorf("operator keeps Secret rights without admission: %v", v)
	}
}

func chartTemplateDigest(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "operator.image.tag=v9", "--set", "operator.image.digest="+kit.ChartDigest,
		"--set", "provisioner.image.registry=127.0.0.1:5000", "--set", "provisioner.image.repository=brewlet/brewlet-provisioner",
		"--set", "provisioner.image.digest="+kit.ChartDigest, "--set", "operator.image.pullPolicy=Always")...)
	dep, ds := chartCheckCommon(t, rc, kit.ChartNS)
	oc, pc := dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0]
	if oc.Image != "ghcr.io/brewlet-sh/brewlet-operator@"+kit.ChartDigest || oc.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("operator image %q (%s): want the digest only", oc.Image, oc.ImagePullPolicy)
	}
	if pc.Image != "127.0.0.1:5000/brewlet/brewlet-provisioner@"+kit.ChartDigest {
		t.Errorf("provisioner image %q: want registry/repository@digest", pc.Image)
	}
	rc = kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "operator.image.tag=v9")...)
	dep, _ = chartCheckCommon(t, rc, kit.ChartNS)
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/brewlet-sh/brewlet-operator:v9" {
		t.Errorf("operator image %q: want the tag", img)
	}
}
