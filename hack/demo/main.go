// Command demo is Brewlet's main job on this machine.
//
//	demo up    start (or reuse) a real one-node cluster with a real kubelet, install the
//	           chart, approve a runtime, deploy a web app on it and rotate the runtime
//	demo down  remove everything `demo up` started
//
// The cluster's components run in the background after `up` returns; their directories,
// logs and the admin kubeconfig are below BREWLET_DEMO_DIR (default /tmp/brewlet-demo).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"brewlet.sh/brewlet/test/cluster"
	"brewlet.sh/brewlet/test/firsthour"
	"brewlet.sh/brewlet/test/framework"
	"brewlet.sh/brewlet/test/framework/hostops"
)

func main() {
	if len(os.Args) != 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: demo up|down")
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: run as root: the cluster's node runs containerd, runc and a kubelet")
		os.Exit(1)
	}
	if os.Args[1] == "up" {
		// The node runs in a mount namespace of its own whose root is shared, as on a real
		// node, whatever this machine's root is (make down needs no namespace: it kills the
		// processes, and the namespace with its mounts goes with the last of them).
		hostops.EnterNodeMountNamespace()
	}
	dir := os.Getenv("BREWLET_DEMO_DIR")
	if dir == "" {
		dir = "/tmp/brewlet-demo"
	}
	// The framework keeps every component below BaseDir; a test run's sweep looks only
	// below its own directory, so it never touches the demo's cluster.
	if err := os.Setenv("BREWLET_E2E_DIR", dir); err != nil {
		fatal(err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		fatal(err)
	}
	defer unlock()
	if os.Args[1] == "down" {
		down()
		return
	}
	up()
}

// lockDir makes sure dir is root's own directory (root acts on what it finds there: saved
// kubeconfig, recorded processes) and holds its lock, so that two `up`s or an `up` and a
// `down` never run at once.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s must be a directory owned by root and writable only by it (BREWLET_DEMO_DIR chooses another)", dir)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("another 'make demo' or 'make down' is running on %s", dir)
	}
	return func() { _ = f.Close() }, nil
}

func down() {
	if errs := framework.SweepAll(); len(errs) > 0 {
		fatal(errors.Join(errs...))
	}
	_ = os.Remove(cluster.StatePath())
	fmt.Printf("removed the local cluster in %s: its processes, containers, mounts, bridge and cgroups\n", framework.BaseDir())
}

func up() {
	ctx := context.Background()
	start := time.Now()
	r := &runner{}
	p := &firsthour.Progress{Out: os.Stdout, Total: 1 + firsthour.StepCount()}
	var c *cluster.Cluster
	p.Do(r, "Start a one-node cluster: etcd, kube-apiserver, controller-manager, scheduler, containerd + runc, registry, kubelet", func() (string, error) {
		c = reuse(ctx)
		if c != nil {
			return "reusing the cluster that is up (" + c.Kubeconfig + ")", nil
		}
		framework.KeepRunning()
		c = cluster.Start(r)
		if err := c.Save(); err != nil {
			return "", err
		}
		return fmt.Sprintf("node %s, API server https://%s:%d, registry %s", c.NodeName, c.APIHost, c.APIPort, c.Registry), nil
	})
	// From here a failure (or an interrupt) leaves the cluster up, to be looked at and
	// removed by `down`. Before, an interrupt ends the command at once; `up` and `down`
	// remove what it had started.
	r.keep = true
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	f := firsthour.New(r, c, os.Stdout)
	f.Progress = p
	f.Run(ctx)
	fmt.Printf(`
Brewlet is running on a local cluster (%s in all).

  export KUBECONFIG=%s
  %s get runtimeimages,nodeprofiles,noderuntimes
  %s -n %s get pods -o wide
  %s get --raw /api/v1/namespaces/%s/services/%s:http/proxy/
  %s status        # where is my rotation (docs/rotation.md)

Component logs: %s/*/logs. Remove everything with: make down
`, time.Since(start).Round(time.Second), c.Kubeconfig, kubectl(), kubectl(), firsthour.AppNamespace,
		kubectl(), firsthour.AppNamespace, firsthour.App, filepath.Join(c.WorkDir(), "bin", "brewlet"), framework.BaseDir())
}

// reuse returns the saved cluster when it is healthy; otherwise it removes whatever an earlier
// run left and returns nil.
func reuse(ctx context.Context) *cluster.Cluster {
	c, err := cluster.Load()
	if err == nil {
		// A node briefly NotReady (a machine just resumed) is waited for; a component that is
		// gone is not.
		deadline := time.Now().Add(45 * time.Second)
		for {
			if err = c.Healthy(ctx); err == nil {
				return c
			}
			if c.Gone() != nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(2 * time.Second)
		}
		fmt.Printf("      the saved cluster cannot be reused (%v): removing it\n", err)
	} else if !errors.Is(err, os.ErrNotExist) {
		fmt.Printf("      unreadable cluster state (%v): removing it\n", err)
	}
	if errs := framework.SweepAll(); len(errs) > 0 {
		fatal(errors.Join(errs...))
	}
	_ = os.Remove(cluster.StatePath())
	return nil
}

func kubectl() string { return filepath.Join(framework.ToolsBin(), "kubectl") }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "demo:", err)
	os.Exit(1)
}

// runner is the framework's TB outside a test: a failure ends the command. Before the cluster
// is up it also removes what was started; afterwards the cluster stays for inspection.
type runner struct {
	cleanups []func()
	failed   bool
	keep     bool
}

func (r *runner) Helper()           {}
func (r *runner) Fatal(args ...any) { r.fail(fmt.Sprint(args...)) }
func (r *runner) Fatalf(f string, a ...any) {
	r.fail(fmt.Sprintf(f, a...))
}
func (r *runner) Errorf(f string, a ...any) {
	r.failed = true
	fmt.Fprintf(os.Stderr, "demo: "+f+"\n", a...)
}
func (r *runner) Skipf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)) }
func (r *runner) Logf(f string, a ...any)  { fmt.Fprintf(os.Stderr, f+"\n", a...) }
func (r *runner) Cleanup(fn func())        { r.cleanups = append(r.cleanups, fn) }
func (r *runner) Failed() bool             { return r.failed }

func (r *runner) fail(msg string) {
	r.failed = true
	fmt.Fprintln(os.Stderr, "demo: "+msg)
	if r.keep {
		fmt.Fprintf(os.Stderr, "demo: the cluster stays up for inspection (logs in %s/*/logs); 'make down' removes it\n", framework.BaseDir())
	} else {
		for i := len(r.cleanups) - 1; i >= 0; i-- {
			r.cleanups[i]()
		}
	}
	os.Exit(1)
}
