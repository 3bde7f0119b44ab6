package firsthour

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brewletv1 "brewlet.sh/brewlet/api/v1alpha1"
	"brewlet.sh/brewlet/internal/images"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/cluster"
	"brewlet.sh/brewlet/test/framework"
)

func (f *Flow) buildImages(ctx context.Context) (string, error) {
	b := images.Builder{ModuleDir: f.Root, Version: ImageTag}
	f.Images = map[string]string{}
	var lines []string
	for _, c := range images.Components {
		idx, err := b.Build(ctx, c, []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}})
		if err != nil {
			return "", err
		}
		ref, err := images.Push(ctx, idx, f.C.Registry+"/brewlet/"+c.Name, ImageTag, false, f.C.RegistryAccess().Options()...)
		if err != nil {
			return "", err
		}
		f.Images[c.Name] = ref
		lines = append(lines, ref)
	}
	return strings.Join(lines, "\n"), nil
}

func (f *Flow) buildRuntimes(ctx context.Context) (string, error) {
	env, err := f.registryEnv()
	if err != nil {
		return "", err
	}
	refs, err := BuildRuntimes(ctx, f.Root, f.C.Registry, "python", f.Out, env...)
	if err != nil {
		return "", err
	}
	if refs["python1"] == "" || refs["python2"] == "" {
		return "", fmt.Errorf("hack/runtimes.sh printed no python1/python2 references: %v", refs)
	}
	f.Runtimes = refs
	return "generation 1: " + refs["python1"] + "\ngeneration 2: " + refs["python2"], nil
}

// chartValues are the values a local cluster needs: images by digest from the node's
// registry, the node pool, the node's relocated paths, containerd (containerdValues), the
// API server's address (no
// kube-proxy), and host networking for the agent (the registry listens on the node's
// loopback).
func (f *Flow) chartValues() map[string]any {
	image := func(name string) map[string]any {
		repo, digest, _ := strings.Cut(f.Images[name], "@")
		reg, path, _ := strings.Cut(repo, "/")
		return map[string]any{"registry": reg, "repository": path, "digest": digest}
	}
	return map[string]any{
		"apiServer": map[string]any{"host": f.C.APIHost, "port": f.C.APIPort},
		"operator": map[string]any{"replicas": 1, "image": image("brewlet-operator"),
			// A failure budget of 0: the app is the only opted-in workload, and its failing
			// restart onto a bad generation rolls the runtime back (TestFirstHourOnKubelet).
			"rotationRestarts": map[string]any{"enabled": true, "maxFailures": 0}},
		"provisioner": map[string]any{
			"image":       image("brewlet-provisioner"),
			"pools":       []any{map[string]any{"key": cluster.PoolKey, "values": []string{cluster.PoolName}}},
			"hostPrefix":  f.C.HostPrefix,
			"hostNetwork": true,
			// Short, so that removing Brewlet does not wait long for unused runtimes.
			"gc": map[string]any{"grace": "20s"},
			// The agent's pass period is a fifth of this: a local cluster reacts in seconds.
			"authorizationTTL": "2m",
			"containerd":       f.containerdValues(),
			// The registry serves TLS with a CA of its own and requires credentials: the
			// agent trusts it through the node's hosts.toml and asks the kubelet's credential
			// provider (the Secret is brewlet-operator's, which reads signatures).
			"registry": map[string]any{"hostsDir": f.C.RegistryHostsDir, "credentialsSecret": RegistrySecret,
				"credentialProviders": map[string]any{"config": f.C.CredentialProviderConfig, "binDir": f.C.CredentialProviderBinDir}},
		},
		"registry":     map[string]any{"caBundle": map[string]any{"configMap": RegistryCA, "secret": "", "key": "ca.crt"}},
		"verification": map[string]any{"publicKeys": []string{f.SigningKey}},
	}
}

// mergeValues returns base with over merged in: maps key by key, anything else replaced.
func mergeValues(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		b, bok := out[k].(map[string]any)
		o, ook := v.(map[string]any)
		if bok && ook {
			out[k] = mergeValues(b, o)
		} else {
			out[k] = v
		}
	}
	return out
}

// containerdValues leave containerd as the node ships it (the handler registered, the shim
// installed: mode none), or, on a cluster started with AgentRegistersHandler, let the
// agent register the handler as on a stock node: mode validated with the machine's
// containerd and restart command run chrooted into the node's root. The chart's default
// propagation (HostToContainer) needs the node's root shared, as the harness makes it by
// default; a run with a private node root (framework.NodeRoot) sets None, as such a node's
// operator must.
func (f *Flow) containerdValues() map[string]any {
	v := map[string]any{"restart": string(f.containerdMode()), "config": f.C.ContainerdConfig,
		"socket": f.C.ContainerdSocket, "shimDir": ""}
	if f.C.ContainerdRestartCommand != "" {
		v["binary"], v["restartCommand"] = f.C.ContainerdBinary, f.C.ContainerdRestartCommand
		v["runOnHost"] = true
		if framework.NodeRoot() == "private" {
			v["hostRootPropagation"] = "None"
		}
	}
	return v
}

func (f *Flow) containerdMode() vocab.ContainerdRestart {
	if f.C.ContainerdRestartCommand != "" {
		return vocab.ContainerdRestartValidated
	}
	return vocab.ContainerdRestartNone
}

// Helm runs the pinned helm against the cluster with its state below the cluster's directory.
func (f *Flow) Helm(ctx context.Context, args ...string) (string, error) {
	home := filepath.Join(f.C.WorkDir(), "helm")
	cmd := framework.HelmCommand(ctx, f.T, home, f.C.Kubeconfig, args...)
	// Interrupted, helm marks the release failed instead of leaving it pending, which would
	// block every later upgrade.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w\n%s", args[0], err, out)
	}
	return string(out), nil
}

// Kubectl runs the pinned kubectl as cluster-admin.
func (f *Flow) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, framework.Tool(f.T, "kubectl"), append([]string{"--kubeconfig", f.C.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (f *Flow) installChart(ctx context.Context) (string, error) {
	if err := f.registryObjects(ctx); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(mergeValues(f.chartValues(), f.Values), "", "  ")
	if err != nil {
		return "", err
	}
	values := filepath.Join(f.C.WorkDir(), "values.json")
	if err := os.WriteFile(values, b, 0o644); err != nil {
		return "", err
	}
	if _, err := f.Helm(ctx, "upgrade", "--install", Release, filepath.Join(f.Root, "charts", "brewlet"),
		"--namespace", Namespace, "--create-namespace", "--values", values, "--wait", "--timeout", "5m"); err != nil {
		return "", fmt.Errorf("%w\n%s", err, f.describe(ctx, Namespace))
	}
	out, err := f.Kubectl(ctx, "get", "deployment,daemonset", "-n", Namespace)
	return "values: " + values + "\n" + out, err
}

// createIfAbsent creates obj unless an object of its name exists (a second run keeps what the
// first made).
func (f *Flow) createIfAbsent(ctx context.Context, obj client.Object) error {
	err := f.Clients.CL.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (f *Flow) approveRuntime(ctx context.Context) (string, error) {
	np := &brewletv1.NodeProfile{ObjectMeta: metav1.ObjectMeta{Name: Profile}, Spec: brewletv1.NodeProfileSpec{
		NodePool:          brewletv1.NodePool{Key: cluster.PoolKey, Names: []string{cluster.PoolName}},
		RuntimeImages:     []brewletv1.OfferedRuntime{{ID: RuntimeID}},
		ContainerdRestart: string(f.containerdMode())}}
	if err := f.createIfAbsent(ctx, np); err != nil {
		return "", err
	}
	ri := &brewletv1.RuntimeImage{ObjectMeta: metav1.ObjectMeta{Name: RuntimeID}, Spec: brewletv1.RuntimeImageSpec{
		Source:      brewletv1.RuntimeImageSource{Image: f.Runtimes["python1"]},
		User:        brewletv1.RuntimeUser{UID: RuntimeUID, GID: RuntimeUID},
		Description: "CPython 3.11 from Debian packages"}}
	if err := f.createIfAbsent(ctx, ri); err != nil {
		return "", err
	}
	if err := f.WaitRotated(ctx, ""); err != nil {
		return "", err
	}
	if err := poll(ctx, waitLong, func(ctx context.Context) (bool, string, error) {
		got := &brewletv1.NodeProfile{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: Profile}, got); err != nil {
			return false, "", err
		}
		return got.Status.ReadyNodes >= 1, fmt.Sprintf("NodeProfile %s: %d ready nodes, conditions %v", Profile, got.Status.ReadyNodes, got.Status.Conditions), nil
	}); err != nil {
		return "", err
	}
	out, err := f.Kubectl(ctx, "get", "nodeprofiles,runtimeimages")
	if err != nil {
		return out, err
	}
	signed, err := f.Kubectl(ctx, "get", "runtimeimage", RuntimeID, "-o", `jsonpath={.status.conditions[?(@.type=="SignatureVerified")].message}`)
	return out + "\nSignatureVerified: " + signed, err
}

// WaitRotated waits until the RuntimeImage's current generation (of digest, when set) is
// approved and every assigned node runs it.
func (f *Flow) WaitRotated(ctx context.Context, digest string) error {
	return poll(ctx, waitLong, func(ctx context.Context) (bool, string, error) {
		ri := &brewletv1.RuntimeImage{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: RuntimeID}, ri); err != nil {
			return false, "", err
		}
		st := ri.Status
		why := fmt.Sprintf("RuntimeImage %s: generation %d digest %s rotation %+v conditions %v", RuntimeID, st.Generation, st.Digest, st.Rotation, st.Conditions)
		// The chart requires the cluster key's signature: an approval without a verified
		// signature would mean the requirement did not reach the operator.
		if st.Generation == 0 || (digest != "" && st.Digest != digest) || !meta.IsStatusConditionTrue(st.Conditions, string(vocab.ConditionApproved)) ||
			!meta.IsStatusConditionTrue(st.Conditions, string(vocab.ConditionSignatureVerified)) ||
			!meta.IsStatusConditionTrue(st.Conditions, string(vocab.ConditionRotationComplete)) || st.Rotation == nil ||
			st.Rotation.Target.Generation != st.Generation || st.Rotation.Nodes.Current < 1 {
			return false, why, nil
		}
		return true, why, nil
	})
}

func (f *Flow) publishApp(ctx context.Context) (string, error) {
	bin := filepath.Join(f.C.WorkDir(), "bin", "brewlet")
	if err := BuildCLI(ctx, f.Root, bin); err != nil {
		return "", err
	}
	env, err := f.registryEnv()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, "push", "--ca-file="+f.C.RegistryCAFile, f.C.Registry+"/apps/"+App+":1",
		"--layer", "app="+filepath.Join(f.Root, "examples", App)+":/app/"+App,
		"--entrypoint", "python", "--arg", "/app/"+App+"/server.py", "--env", "PORT=8080",
		"--requires-runtime", RuntimeID)
	cmd.Stderr, cmd.Env = f.Out, append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("brewlet push: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f.AppImage = lines[len(lines)-1]
	return "brewlet push " + f.C.Registry + "/apps/" + App + ":1 -> " + f.AppImage, nil
}

// AppDeployment is the app as a developer writes it: the runtime by annotation, the
// RuntimeClass, and no securityContext (admission sets the runtime's user).
func (f *Flow) AppDeployment() *appsv1.Deployment {
	replicas, no := int32(2), false
	labels := map[string]string{"app": App}
	var spread []corev1.TopologySpreadConstraint
	if f.Spread {
		spread = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}}
	}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: App, Namespace: AppNamespace,
		// Opted in: after a rotation reaches every node, the operator restarts it.
		Annotations: map[string]string{vocab.AnnotationRestartOnRotation: "true"}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{vocab.AnnotationRuntimeImage: RuntimeID}},
				Spec: corev1.PodSpec{RuntimeClassName: ptr.To(vocab.RuntimeClassName), AutomountServiceAccountToken: &no,
					TopologySpreadConstraints: spread,
					Containers: []corev1.Container{{Name: "web", Image: f.AppImage,
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{PeriodSeconds: 2, ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}}}}}}}}
}

func (f *Flow) deployApp(ctx context.Context) (string, error) {
	// Pod Security restricted, as a careful platform team sets it: the app still needs no
	// securityContext (pod admission writes it), and a real kubelet verifies runAsNonRoot.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AppNamespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	if err := f.createIfAbsent(ctx, ns); err != nil {
		return "", err
	}
	want := f.AppDeployment()
	cur := &appsv1.Deployment{}
	switch err := f.Clients.CL.Get(ctx, client.ObjectKeyFromObject(want), cur); {
	case apierrors.IsNotFound(err):
		if err := f.Clients.CL.Create(ctx, want); err != nil {
			return "", err
		}
	case err != nil:
		return "", err
	default:
		// A second run keeps the pods' restart annotation: only the developer's fields change.
		ann := cur.Spec.Template.Annotations
		cur.Spec = want.Spec
		for k, v := range ann {
			if _, ok := cur.Spec.Template.Annotations[k]; !ok {
				cur.Spec.Template.Annotations[k] = v
			}
		}
		if err := f.Clients.CL.Update(ctx, cur); err != nil {
			return "", err
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: App, Namespace: AppNamespace}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": App},
		Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	if err := f.createIfAbsent(ctx, svc); err != nil {
		return "", err
	}
	if err := f.WaitDeployment(ctx, App); err != nil {
		return "", err
	}
	return f.Kubectl(ctx, "get", "pods", "-n", AppNamespace, "-o", "wide")
}

// WaitDeployment waits until every replica of the app namespace's deployment is updated and
// available, and no old one is left.
func (f *Flow) WaitDeployment(ctx context.Context, name string) error {
	err := poll(ctx, waitLong, func(ctx context.Context) (bool, string, error) {
		d := &appsv1.Deployment{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Namespace: AppNamespace, Name: name}, d); err != nil {
			return false, "", err
		}
		s, want := d.Status, *d.Spec.Replicas
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want,
			fmt.Sprintf("deployment %s: %d updated, %d total, %d available of %d", name, s.UpdatedReplicas, s.Replicas, s.AvailableReplicas, want), nil
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, f.describe(ctx, AppNamespace))
	}
	return nil
}

// describe summarizes a namespace's pods and events for an error message.
func (f *Flow) describe(ctx context.Context, ns string) string {
	pods, _ := f.Kubectl(ctx, "get", "pods", "-n", ns, "-o", "wide")
	events, _ := f.Kubectl(ctx, "get", "events", "-n", ns, "--sort-by=.lastTimestamp")
	return pods + "\n" + events + f.crashLogs(ctx, ns)
}

// crashLogs are the last lines of the previous run of every container that restarted: why
// a crash-looping component exited.
func (f *Flow) crashLogs(ctx context.Context, ns string) string {
	list := &corev1.PodList{}
	if err := f.Clients.CL.List(ctx, list, client.InNamespace(ns)); err != nil {
		return ""
	}
	var out strings.Builder
	for _, p := range list.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount == 0 {
				continue
			}
			tail := int64(20)
			b, err := f.Clients.CS.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, Previous: true, TailLines: &tail}).DoRaw(ctx)
			fmt.Fprintf(&out, "\n--- %s/%s, previous run (%v):\n%s", p.Name, c.Name, err, b)
		}
	}
	return out.String()
}

// Ask sends GET path to the app through its Service, via the API server's service proxy (the
// cluster has no kube-proxy), until the answer contains want.
func (f *Flow) Ask(ctx context.Context, path, want string) (string, error) {
	var body string
	err := poll(ctx, time.Minute, func(ctx context.Context) (bool, string, error) {
		b, err := f.Clients.CS.CoreV1().Services(AppNamespace).ProxyGet("http", App, "http", path, nil).DoRaw(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		body = string(b)
		return strings.Contains(body, want), "answer without " + want + ":\n" + body, nil
	})
	return body, err
}

func (f *Flow) ask(ctx context.Context) (string, error) {
	body, err := f.Ask(ctx, "/", "hello from")
	return "GET http://" + App + "." + AppNamespace + "/\n" + body, err
}

func (f *Flow) rotate(ctx context.Context) (string, error) {
	ri := &brewletv1.RuntimeImage{}
	if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: RuntimeID}, ri); err != nil {
		return "", err
	}
	target := f.Runtimes["python2"]
	if ri.Spec.Source.Image != target {
		ri.Spec.Source.Image = target
		if err := f.Clients.CL.Update(ctx, ri); err != nil {
			return "", err
		}
	}
	_, digest, _ := strings.Cut(target, "@")
	if err := f.WaitRotated(ctx, digest); err != nil {
		return "", err
	}
	return f.Kubectl(ctx, "get", "runtimeimage", RuntimeID, "-o", "wide")
}

// WaitOldTasks waits until the RuntimeImage's OldGenerationTasks condition is want and
// returns its message.
func (f *Flow) WaitOldTasks(ctx context.Context, want bool) (string, error) {
	msg := ""
	err := poll(ctx, waitLong, func(ctx context.Context) (bool, string, error) {
		ri := &brewletv1.RuntimeImage{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: RuntimeID}, ri); err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(ri.Status.Conditions, string(vocab.ConditionOldGenerationTasks))
		if c == nil {
			return false, "no OldGenerationTasks condition yet", nil
		}
		msg = c.Message
		// The node's agent runs: its report is current (its Lease is the heartbeat).
		for _, o := range ri.Status.TaskObservations {
			if !o.Current {
				return false, fmt.Sprintf("node %s's report is not current: %+v", o.NodeName, o), nil
			}
		}
		return (c.Status == metav1.ConditionTrue) == want, fmt.Sprintf("OldGenerationTasks=%s: %s; observations %+v", c.Status, c.Message, ri.Status.TaskObservations), nil
	})
	return msg, err
}

func (f *Flow) restartApp(ctx context.Context) (string, error) {
	// The Deployment opted in (brewlet.sh/restart-on-rotation): once the rotation reached
	// every node, the operator set the pod-template barrier and the Deployment's own
	// rolling update replaces the pods. Nothing is done by hand here.
	var rec string
	if err := poll(ctx, waitLong, func(ctx context.Context) (bool, string, error) {
		ri := &brewletv1.RuntimeImage{}
		if err := f.Clients.CL.Get(ctx, client.ObjectKey{Name: RuntimeID}, ri); err != nil {
			return false, "", err
		}
		if ri.Status.Rotation == nil {
			return false, "no rotation status yet", nil
		}
		for _, r := range ri.Status.Rotation.Restarts {
			if r.Kind == "Deployment" && r.Namespace == AppNamespace && r.Name == App {
				rec = fmt.Sprintf("%s %s/%s: %s (%s)", r.Kind, r.Namespace, r.Name, r.Outcome, r.Message)
				return r.Outcome == "Succeeded", rec, nil
			}
		}
		return false, fmt.Sprintf("no restart record for the app: %+v", ri.Status.Rotation.Restarts), nil
	}); err != nil {
		return "", fmt.Errorf("%w\n%s", err, f.describe(ctx, AppNamespace))
	}
	if err := f.WaitDeployment(ctx, App); err != nil {
		return "", err
	}
	body, err := f.Ask(ctx, "/", "BREWLET_RUNTIME_GENERATION=2")
	if err != nil {
		return "", err
	}
	msg, err := f.WaitOldTasks(ctx, false)
	return "restart: " + rec + "\nGET http://" + App + "." + AppNamespace + "/\n" + body + "\nOldGenerationTasks: " + msg, err
}
