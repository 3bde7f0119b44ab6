package framework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodConfig returns a sandbox config whose cgroups live under the node's private parent.
func (n *Node) PodConfig(name string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	uid := hex.EncodeToString(b)
	logDir := filepath.Join(n.Dir, "pods", name+"-"+uid)
	_ = os.MkdirAll(logDir, 0o755)
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid},
		LogDirectory: logDir,
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/" + n.CgroupParent + "/pod" + uid,
		},
	}
}

// ContainerConfig returns a container config running cmd in image.
func ContainerConfig(name, image string, cmd ...string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  cmd,
		LogPath:  name + ".log",
		Linux:    &runtimeapi.LinuxContainerConfig{},
	}
}

// RunPod pulls nothing: the sandbox image is pinned and pulled by containerd itself.
func (n *Node) RunPod(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	r, err := n.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		return "", err
	}
	return r.PodSandboxId, nil
}

// Pull pulls an image through CRI from the node's registry, with its credentials when it
// requires them (as the kubelet passes a pod's).
func (n *Node) Pull(ctx context.Context, image string, pod *runtimeapi.PodSandboxConfig) error {
	req := &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}, SandboxConfig: pod}
	if a := n.RegistryAccess; a != nil && strings.HasPrefix(image, a.Addr+"/") {
		req.Auth = &runtimeapi.AuthConfig{Username: a.User, Password: a.Password}
	}
	_, err := n.Images.PullImage(ctx, req)
	return err
}

// CreateStart pulls the image, creates and starts a container in a pod.
func (n *Node) CreateStart(ctx context.Context, podID string, pod *runtimeapi.PodSandboxConfig, c *runtimeapi.ContainerConfig) (string, error) {
	if err := n.Pull(ctx, c.Image.Image, pod); err != nil {
		return "", fmt.Errorf("pull %s: %w", c.Image.Image, err)
	}
	r, err := n.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: c, SandboxConfig: pod})
	if err != nil {
		return "", err
	}
	if _, err := n.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: r.ContainerId}); err != nil {
		return r.ContainerId, err
	}
	return r.ContainerId, nil
}

// ExecSync runs cmd in a container and returns its output and exit code.
func (n *Node) ExecSync(ctx context.Context, cid string, cmd ...string) (stdout, stderr string, code int32, err error) {
	r, err := n.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: cid, Cmd: cmd, Timeout: 30})
	if err != nil {
		return "", "", -1, err
	}
	return string(r.Stdout), string(r.Stderr), r.ExitCode, nil
}

// Crictl runs the pinned crictl against this node.
func (n *Node) Crictl(t TB, args ...string) (string, error) {
	t.Helper()
	ep := "unix://" + n.Socket
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, Tool(t, "crictl"), append([]string{"--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", "30s"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// removePods stops and removes every pod sandbox, so shims exit and unmount cleanly.
func (n *Node) removePods() {
	if n.Runtime == nil || !n.Containerd.Alive() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pods, err := n.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		_, _ = n.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id})
		_, _ = n.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id})
	}
}
