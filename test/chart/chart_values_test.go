package chart

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"brewlet.sh/brewlet/internal/admission"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/kit"
)

// Values that place and configure the components must reach the flag, mount or field the
// component reads; values the chart refuses must stop helm before anything is installed.

func chartTemplatePlacement(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, "--set-json", `provisioner.pools=[{"key":"node-restriction.kubernetes.io/pool","values":["a"]},{"key":"node-restriction.kubernetes.io/tier","values":["b"]}]`,
		"--set", "provisioner.includeControlPlane=true",
		"--set-json", `provisioner.tolerations=[{"key":"dedicated","operator":"Equal","value":"brewlet","effect":"NoSchedule"}]`)
	_, ds := chartCheckCommon(t, rc, kit.ChartNS)
	terms := ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	want := []corev1.NodeSelectorTerm{
		{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "node-restriction.kubernetes.io/pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
		{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "node-restriction.kubernetes.io/tier", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
		// A node that left the pools keeps its agent until its host changes are reversed.
		{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: vocab.LabelHostChanges, Operator: corev1.NodeSelectorOpIn, Values: []string{"present"}}}},
	}
	if !equality.Semantic.DeepEqual(terms, want) {
		t.Errorf("terms %+v, want %+v", terms, want)
	}
	tol := ds.Spec.Template.Spec.Tolerations
	wantTol := []corev1.Toleration{
		{Key: vocab.TaintRuntimeNotReady, Operator: corev1.TolerationOpExists},
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "brewlet", Effect: corev1.TaintEffectNoSchedule},
	}
	if !equality.Semantic.DeepEqual(tol, wantTol) {
		t.Errorf("tolerations %+v, want %+v", tol, wantTol)
	}
}

func chartTemplateSharedContainerdDir(t *testing.T) {
	rc := kit.ChartMustRender(t, "other-ns", chartPools("--set", "provisioner.containerd.config=/var/lib/node/containerd/config.toml",
		"--set", "provisioner.containerd.socket=/var/lib/node/containerd/containerd.sock")...)
	_, ds := chartCheckCommon(t, rc, "other-ns")
	seen := map[string]int{}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		seen[m.MountPath]++
	}
	if seen["/var/lib/node/containerd"] != 1 {
		t.Errorf("mounts of the shared containerd directory: %d, want 1 (mount paths must be unique)", seen["/var/lib/node/containerd"])
	}
}

func chartTemplateNodeSettings(t *testing.T) {
	rc := kit.ChartMustRender(t, "other-ns", chartPools(
		"--set", "provisioner.hostPrefix=/srv/test", "--set", "provisioner.gc.grace=10m", "--set", "provisioner.authorizationTTL=90s",
		"--set", "provisioner.containerd.restart=none", "--set", "provisioner.containerd.config=/etc/k8s/containerd/config.toml",
		"--set", "provisioner.containerd.socket=/run/k8s/containerd.sock", "--set", "provisioner.containerd.shimDir=",
		"--set", "provisioner.containerd.restartCommand=kill -HUP 1", "--set", "provisioner.containerd.runOnHost=false",
		"--set", "provisioner.containerd.configTemplate=/etc/k8s/containerd/config-v3.toml.tmpl",
		"--set-json", `provisioner.registry.mirrors=[{"registry":"registry.example","mirrors":["m1:5000","m2.example"]}]`,
		"--set", "provisioner.registry.insecure=true", "--set", "provisioner.registry.credentialsSecret=pull",
		"--set", "provisioner.registry.hostsDir=/etc/registries/certs.d",
		"--set", "provisioner.registry.credentialProviders.config=/etc/kubelet/cp/config.yaml",
		"--set", "provisioner.registry.credentialProviders.binDir=/usr/libexec/kubelet-cp",
		"--set", "registry.caBundle.configMap=corp-ca", "--set", "registry.caBundle.key=bundle.pem",
		"--set", "proxy.httpsProxy=http://proxy.corp:3128", "--set-json", `proxy.noProxy=["10.0.0.0/8",".corp"]`,
		"--set", "apiServer.host=api.corp",
		"--set-json", `verification.publicKeys=[`+chartQuote(chartTestKey)+`]`,
		"--set-file", "verification.trustedRoot="+chartTrustedRoot(t),
		"--set-json", `verification.keyless=[{"issuer":"https://token.actions.githubusercontent.com","subjectRegExp":"^https://github.com/example/"}]`,
		"--set-json", `imagePullSecrets=["regcred"]`)...)
	dep, ds := chartCheckCommon(t, rc, "other-ns")
	chartCheckSignatureKeys(t, rc, dep, ds)
	pc := ds.Spec.Template.Spec.Containers[0]
	for flag, v := range map[string]string{"--host-prefix": "/srv/test", "--gc-grace": "10m", "--authorization-ttl": "90s",
		"--containerd-restart": "none", "--containerd-config": "/etc/k8s/containerd/config.toml",
		"--containerd-socket": "/run/k8s/containerd.sock", "--containerd-restart-command": "kill -HUP 1", "--insecure-registries": "",
		"--containerd-config-template": "/etc/k8s/containerd/config-v3.toml.tmpl",
		"--registry-hosts-dir":         "/etc/registries/certs.d", "--registry-ca-file": "/etc/brewlet/registry-ca/ca.crt",
		"--image-credential-provider-config": "/etc/kubelet/cp/config.yaml", "--image-credential-provider-bin-dir": "/usr/libexec/kubelet-cp",
	} {
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
		"/srv/test/run/brewlet": "/srv/test/run/brewlet", "/etc/k8s/containerd": "/etc/k8s/containerd", "/run/k8s": "/run/k8s",
		"/etc/registries/certs.d": "/etc/registries/certs.d", "/etc/kubelet/cp": "/etc/kubelet/cp", "/usr/libexec/kubelet-cp": "/usr/libexec/kubelet-cp"}
	if !reflect.DeepEqual(hp, want) {
		t.Errorf("host paths %v, want %v", hp, want)
	}
	// The registry configuration and the CA bundle are read-only to the agent.
	for _, m := range pc.VolumeMounts {
		if (m.MountPath == "/etc/registries/certs.d" || m.MountPath == "/etc/brewlet/registry-ca" || m.MountPath == "/etc/kubelet/cp" ||
			m.MountPath == "/usr/libexec/kubelet-cp") && !m.ReadOnly {
			t.Errorf("%s mounted writable", m.MountPath)
		}
	}
	var caVol *corev1.ConfigMapVolumeSource
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.Name == "registry-ca" {
			caVol = v.ConfigMap
		}
	}
	if caVol == nil || caVol.Name != "corp-ca" || !reflect.DeepEqual(caVol.Items, []corev1.KeyToPath{{Key: "bundle.pem", Path: "ca.crt"}}) ||
		!slices.ContainsFunc(pc.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "registry-ca" && m.MountPath == "/etc/brewlet/registry-ca"
		}) {
		t.Errorf("registry CA bundle volume %+v", caVol)
	}
	// The proxy reaches both components, with the cluster's names and the API server out of it.
	for _, c := range []corev1.Container{dep.Spec.Template.Spec.Containers[0], pc} {
		https, _ := chartEnv(c, "HTTPS_PROXY")
		no, _ := chartEnv(c, "NO_PROXY")
		if https != "http://proxy.corp:3128" || no != "127.0.0.1,localhost,.svc,.cluster.local,10.0.0.0/8,.corp,api.corp" {
			t.Errorf("container %s: HTTPS_PROXY %q NO_PROXY %q", c.Name, https, no)
		}
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
	rc.Decode(t, "MutatingWebhookConfiguration", admission.ConfigurationName, mwc)
	if s := mwc.Webhooks[0].ClientConfig.Service; s == nil || s.Namespace != "other-ns" {
		t.Errorf("webhook Service reference %+v does not follow the release namespace", s)
	}
}

func chartTemplateOperatorSettings(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, chartPools("--set", "operator.replicas=3", "--set", "operator.leaderElectionID=brewlet-lock",
		"--set", "admission.webhookPort=10250", "--set", "admission.certResync=30s",
		"--set-json", `operator.nodeSelector={"kubernetes.io/os":"linux"}`,
		"--set-json", `operator.tolerations=[{"key":"infra","operator":"Exists"}]`,
		"--set", "operator.priorityClassName=infra-critical", "--set", "provisioner.priorityClassName=system-node-critical",
		"--set", "operator.resources.limits.memory=1Gi", "--set", "provisioner.resources.requests.cpu=200m")...)
	dep, ds := chartCheckCommonWith(t, rc, kit.ChartNS, "brewlet-lock", 3)
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
}

func chartTemplateNoPools(t *testing.T) {
	_, out, err := kit.ChartTemplate(t, kit.ChartNS)
	if err == nil || !strings.Contains(out, "provisioner.pools is empty") {
		t.Fatalf("helm template without pools: err %v, want the pools message\n%s", err, out)
	}
	// A pool key a node's own kubelet can set would let any node draw an agent (its token,
	// the chart's Secrets) and Brewlet pods: refused, as are Brewlet's own keys.
	for _, key := range []string{"pool.example/name", "pool", "node.kubernetes.io/instance-type",
		vocab.LabelRuntime, vocab.LabelHostChanges, vocab.RuntimeLabel("python-3.12")} {
		_, out, err := kit.ChartTemplate(t, kit.ChartNS, "--set-json", `provisioner.pools=[{"key":"node-restriction.kubernetes.io/pool","values":["a"]},{"key":"`+key+`","values":["b"]}]`)
		if err == nil || !strings.Contains(out, fmt.Sprintf("provisioner.pools key %q: a node's own kubelet can set it", key)) {
			t.Errorf("helm template with pool key %q: err %v, want it refused\n%s", key, err, out)
		}
	}
}

// Keyless identities without a trusted root could never be met: refused at install.
func chartTemplateKeylessWithoutRoot(t *testing.T) {
	_, out, err := kit.ChartTemplate(t, kit.ChartNS, chartPools("--set-json", `verification.keyless=[{"issuer":"https://i","subject":"a"}]`)...)
	if err == nil || !strings.Contains(out, "verification.keyless needs verification.trustedRoot") {
		t.Fatalf("helm template with keyless identities and no trusted root: err %v, want the trusted root message\n%s", err, out)
	}
}

// A template outside the config's directory would not be in the agent's pod.
func chartTemplateTemplateOutsideConfigDir(t *testing.T) {
	_, out, err := kit.ChartTemplate(t, kit.ChartNS, chartPools("--set", "provisioner.containerd.configTemplate=/etc/other/config.toml.tmpl")...)
	if err == nil || !strings.Contains(out, "must be in the directory of provisioner.containerd.config (/etc/containerd)") {
		t.Fatalf("helm template with a template elsewhere: err %v, want the directory message\n%s", err, out)
	}
}

// Startup taints (docs/install.md "Autoscalers") reach the agent's flag, its pod's
// tolerations and the node-scope policy's list; keys Kubernetes manages are refused.
func chartTemplateStartupTaints(t *testing.T) {
	const ca = "startup-taint.cluster-autoscaler.kubernetes.io/brewlet"
	for _, c := range []struct {
		args []string
		keys []string
	}{
		{chartPools(), []string{"brewlet.sh/runtime-not-ready"}},
		{chartPools("--set-json", `provisioner.startupTaints=["`+ca+`","example.com/warming"]`), []string{ca, "example.com/warming"}},
		{chartPools("--set-json", `provisioner.startupTaints=[]`), nil},
	} {
		rc := kit.ChartMustRender(t, kit.ChartNS, c.args...)
		ds := &appsv1.DaemonSet{}
		rc.Decode(t, "DaemonSet", "brewlet-provisioner", ds)
		chartWantArg(t, ds.Spec.Template.Spec.Containers[0], "--startup-taints", strings.Join(c.keys, ","))
		var tolerated []string
		for _, tl := range ds.Spec.Template.Spec.Tolerations {
			if tl.Operator == corev1.TolerationOpExists && tl.Effect == "" {
				tolerated = append(tolerated, tl.Key)
			}
		}
		if !slices.Equal(tolerated, c.keys) {
			t.Errorf("%v: agent tolerates %v, want %v", c.args, tolerated, c.keys)
		}
		vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		rc.Decode(t, "ValidatingAdmissionPolicy", "brewlet-provisioner-node-scope", vap)
		want := `["` + strings.Join(c.keys, `","`) + `"]`
		if c.keys == nil {
			want = "[]"
		}
		found := false
		for _, v := range vap.Spec.Variables {
			found = found || (v.Name == "startupTaints" && v.Expression == want)
		}
		if !found {
			t.Errorf("%v: node-scope policy variables %+v, want startupTaints = %s", c.args, vap.Spec.Variables, want)
		}
	}
	for _, key := range []string{"node.kubernetes.io/not-ready", "node-role.kubernetes.io/control-plane", "karpenter.k8s.io/x"} {
		_, out, err := kit.ChartTemplate(t, kit.ChartNS, chartPools("--set-json", `provisioner.startupTaints=["`+key+`"]`)...)
		if err == nil || !strings.Contains(out, "is in a domain Kubernetes manages") {
			t.Errorf("helm template with startup taint %s: err %v, want the managed-domain refusal\n%s", key, err, out)
		}
	}
}

func chartTemplateNoProvisioner(t *testing.T) {
	rc := kit.ChartMustRender(t, kit.ChartNS, "--set", "provisioner.enabled=false")
	for _, k := range [][2]string{{"DaemonSet", "brewlet-provisioner"}, {"ServiceAccount", "brewlet-provisioner"},
		{"ClusterRole", "brewlet-provisioner"}, {"ValidatingAdmissionPolicy", "brewlet-provisioner-node-scope"}} {
		if rc.Has(k[0], k[1]) {
			t.Errorf("%s %s chartObject with provisioner.enabled=false", k[0], k[1])
		}
	}
	if !rc.Has("Deployment", "brewlet-operator") {
		t.Errorf("operator missing: %v", rc.Names())
	}
}

func chartTemplateSchema(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{chartPools("--set", "provisioner.containerd.restart=always"), "/provisioner/containerd/restart'"},
		{chartPools("--set", "provisioner.containerd.configTemplate=config.toml.tmpl"), "/provisioner/containerd/configTemplate'"},
		{chartPools("--set", "operator.replicass=3"), "replicass"},
		{chartPools("--set", "operator.image.digest=sha256:abc"), "/operator/image/digest'"},
		{chartPools("--set", "metrics.enabled=yes"), "/metrics/enabled'"},
		{chartPools("--set", "provisioner.gc.grace=1 hour"), "/provisioner/gc/grace'"},
		{chartPools("--set", "apiServer.host=https://x"), "/apiServer/host'"},
		{chartPools("--set", "apiServer.host=192.0.2.10:6443"), "/apiServer/host'"},
		{chartPools("--set", "apiServer.port=0"), "/apiServer/port'"},
		{[]string{"--set-json", `provisioner.pools=[{"key":"node-restriction.kubernetes.io/pool","values":[]}]`}, "values"},
		{[]string{"--set-json", `provisioner.pools=[{"key":"node-restriction.kubernetes.io/pool","names":["a"]}]`}, "names"},
		{chartPools("--set", "operator.rotationRestarts.maxConcurrent=0"), "/operator/rotationRestarts/maxConcurrent'"},
		{chartPools("--set", "operator.rotationRestarts.maxConcurrent=101"), "/operator/rotationRestarts/maxConcurrent'"},
		{chartPools("--set", "operator.rotationRestarts.progressDeadline=10 minutes"), "/operator/rotationRestarts/progressDeadline'"},
		{chartPools("--set", "operator.rotationRestarts.progressDeadline=10"), "/operator/rotationRestarts/progressDeadline'"},
		{chartPools("--set", "operator.rotationRestarts.maxFailures=-1"), "/operator/rotationRestarts/maxFailures'"},
		{chartPools("--set", "operator.rotationRestarts.maxFailures=one"), "/operator/rotationRestarts/maxFailures'"},
		{chartPools("--set", "operator.rotationRestarts.soak=5 minutes"), "/operator/rotationRestarts/soak'"},
		{chartPools("--set", "operator.nodeStaleAfter=1 minute"), "/operator/nodeStaleAfter'"},
		{chartPools("--set", "operator.rotationRestarts.enabled=on"), "/operator/rotationRestarts/enabled'"},
		{chartPools("--set-json", `operator.rotationRestarts.namespaces=["Apps_Prod"]`), "/operator/rotationRestarts/namespaces/0'"},
		{chartPools("--set-json", `operator.rotationRestarts.namespaces=["a","a"]`), "/operator/rotationRestarts/namespaces'"},
		{chartPools("--set-json", `operator.rotationRestarts.namespaces=["apps","kube-system"]`), "/operator/rotationRestarts/namespaces/1'"},
		{chartPools("--set", "operator.rotationRestarts.namespace=apps"), "namespace"},
		{chartPools("--set-json", `provisioner.startupTaints=["bad key"]`), "/provisioner/startupTaints/0'"},
		{chartPools("--set-json", `provisioner.startupTaints=["a","a"]`), "/provisioner/startupTaints'"},
		{chartPools("--set", "registry.caBundle.configMap=ca", "--set", "registry.caBundle.secret=ca"), "/registry/caBundle'"},
		{chartPools("--set", "registry.caBundle.key="), "/registry/caBundle/key'"},
		{chartPools("--set", "verification.publicKeys[0]=ssh-ed25519 AAAA"), "/verification/publicKeys/0'"},
		{chartPools("--set-json", `verification.keyless=[{"issuer":"https://i","subject":"a","subjectRegExp":"b"}]`), "/verification/keyless/0'"},
		{chartPools("--set-json", `verification.keyless=[{"subject":"a"}]`), "/verification/keyless/0'"},
		{chartPools("--set-json", `verification.publicKeys=[`+strings.TrimSuffix(strings.Repeat(chartQuote(chartTestKey)+",", 9), ",")+`]`), "/verification/publicKeys'"},
		{chartPools("--set", "proxy.httpsProxy=proxy.corp:3128"), "/proxy/httpsProxy'"},
		{chartPools("--set-json", `proxy.noProxy=["a,b"]`), "/proxy/noProxy/0'"},
		{chartPools("--set", "provisioner.registry.hostsDir=certs.d"), "/provisioner/registry/hostsDir'"},
		{chartPools("--set", "provisioner.registry.credentialProviders.config=config.yaml", "--set", "provisioner.registry.credentialProviders.binDir=/b"),
			"/provisioner/registry/credentialProviders/config'"},
		{chartPools("--set", "provisioner.registry.credentialProviders.config=/etc/cp.yaml"), "/provisioner/registry/credentialProviders/binDir'"},
	} {
		_, out, err := kit.ChartTemplate(t, kit.ChartNS, c.args...)
		if err == nil || !strings.Contains(out, "values don't meet the specifications of the schema") || !strings.Contains(out, c.want) {
			t.Errorf("helm template %v: err %v, want a schema refusal naming %q\n%s", c.args, err, c.want, out)
		}
	}
}
