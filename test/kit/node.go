package kit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/provisioner/install"
	"brewlet.sh/brewlet/internal/vocab"
	"brewlet.sh/brewlet/test/framework"
)

// ContainerPID is the host PID of a running container's init process, from CRI's verbose
// status.
func ContainerPID(t *testing.T, n *framework.Node, cid string) int {
	t.Helper()
	st, err := n.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: cid, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid < 2 {
		t.Fatalf("container %s: no pid in its status (%v): %s", cid, err, st.GetInfo()["info"])
	}
	return info.Pid
}

func HandlerListed(ctx context.Context, n *framework.Node) error {
	st, err := n.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, h := range st.RuntimeHandlers {
		if h.Name == vocab.RuntimeClassName {
			return nil
		}
	}
	return errors.New("CRI does not list the brewlet runtime handler")
}

// DataPath is a node with the CPython runtime installed and authorized, and an
// application artifact holding only /app pushed to the node's registry.
type DataPath struct {
	N      *framework.Node
	Host   hoststate.Layout
	Refs   map[string]string
	App    string // artifact reference
	Epoch  string
	Inst   *install.Installer
	CLI    string
	podIdx int
}

func (d *DataPath) Install(t *testing.T, gen int64) *install.Result {
	t.Helper()
	res, err := d.Inst.Install(context.Background(), install.Request{ID: PyID, Epoch: d.Epoch, Generation: gen,
		Image: d.Refs["python"+string(rune('0'+gen))], UID: 10001, GID: 10001})
	if err != nil {
		t.Fatalf("install generation %d: %v", gen, err)
	}
	return res
}

func (d *DataPath) Authorize(t *testing.T, revoked bool, valid time.Duration) {
	t.Helper()
	cur, err := d.Host.Current(PyID)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := d.Host.WriteAuthorization(hoststate.Authorization{ID: PyID, Epoch: cur.Epoch, Generation: cur.Generation,
		ConfirmedAt: now, ExpiresAt: now.Add(valid), Revoked: revoked, Node: "e2e-node"}); err != nil {
		t.Fatal(err)
	}
}

// Start creates and starts a container of the app in a new brewlet pod.
func (d *DataPath) Start(t *testing.T, ann map[string]string, mutate func(*runtimeapi.ContainerConfig)) (string, *runtimeapi.PodSandboxConfig, error) {
	t.Helper()
	return d.StartIn(t, ann, nil, mutate)
}

// StartIn is start with the pod sandbox's security context (host namespaces, privileged).
func (d *DataPath) StartIn(t *testing.T, ann map[string]string, sandbox *runtimeapi.LinuxSandboxSecurityContext, mutate func(*runtimeapi.ContainerConfig)) (string, *runtimeapi.PodSandboxConfig, error) {
	t.Helper()
	d.podIdx++
	if ann == nil {
		ann = map[string]string{vocab.AnnotationRuntimeImage: PyID}
	}
	pod := d.N.PodConfig(fmt.Sprintf("app-%d", d.podIdx), ann)
	pod.Linux.SecurityContext = sandbox
	ctx := context.Background()
	podID, err := d.N.RunPod(ctx, pod, vocab.RuntimeClassName)
	if err != nil {
		t.Fatalf("run pod: %v", err)
	}
	c := framework.ContainerConfig("app", d.App)
	c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		RunAsUser: &runtimeapi.Int64Value{Value: 10001}, RunAsGroup: &runtimeapi.Int64Value{Value: 10001}}
	c.Envs = []*runtimeapi.KeyValue{{Key: "PATH", Value: []byte("/pod/set/this")}}
	if mutate != nil {
		mutate(c)
	}
	cid, err := d.N.CreateStart(ctx, podID, pod, c)
	return cid, pod, err
}

// Output waits for a container to exit and returns its log.
func (d *DataPath) Output(t *testing.T, cid string, pod *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	code, log := Exited(t, d.N, cid, pod, "app.log")
	if code != 0 {
		t.Fatalf("container exited %d: %s", code, log)
	}
	return log
}

// Exited waits (60 s at most) for a container to exit and returns its exit code and the
// log the CRI wrote to logName in the pod's log directory.
func Exited(t *testing.T, n *framework.Node, cid string, pod *runtimeapi.PodSandboxConfig, logName string) (int32, string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := n.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cid})
		if err != nil {
			t.Fatal(err)
		}
		if st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			b, _ := os.ReadFile(filepath.Join(pod.LogDirectory, logName))
			return st.Status.ExitCode, string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still %v after 60s", cid, st.Status.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// NodeTree lists every path of a node layout with its type and size: what "nothing on the
// node changed" compares. Lock files are the layout's own and are left out.
func NodeTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".lock") {
			return nil
		}
		size := int64(0)
		if info.Mode().IsRegular() {
			size = info.Size()
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, fmt.Sprintf("%s %s %d", rel, info.Mode().Type(), size))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
