package hostops

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// NodeRootEnv chooses the propagation of "/" in the mount namespace the harness's nodes run
// in: "shared" (the default, as systemd makes it on real nodes) or "private" (as on this
// machine type, whose root mount is private). Each test tier runs one of them, so neither a
// developer's machine nor CI's can hide a step that needs the other.
const NodeRootEnv = "BREWLET_NODE_ROOT"

// nodeNSEnv marks a process as running in the harness's mount namespace; its value is the
// PID of the process that created the namespace (the namespace's first process applies the
// propagation, children started later only inherit it).
const nodeNSEnv = "BREWLET_NODE_MOUNT_NS"

// NodeRoot is the propagation of "/" chosen for this run: "shared" or "private".
func NodeRoot() string {
	if v := os.Getenv(NodeRootEnv); v == "private" {
		return v
	}
	return "shared"
}

// EnterNodeMountNamespace re-executes the program in a mount namespace of its own, whose "/"
// has the propagation NodeRoot names, and exits with the child's status; in the child it
// returns. Everything the harness starts (containerd, the shim, the kubelet, pods) mounts
// there, so no mount ever reaches the machine's namespace, whatever its root's propagation,
// and the namespace (with every mount in it) goes away with its last process. Without root
// it returns at once: the tests that need a node then fail as unavailable.
func EnterNodeMountNamespace() {
	if v := os.Getenv(NodeRootEnv); v != "" && v != "shared" && v != "private" {
		fmt.Fprintf(os.Stderr, "framework: %s=%q: want shared or private\n", NodeRootEnv, v)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		return
	}
	if owner := os.Getenv(nodeNSEnv); owner != "" {
		if owner == strconv.Itoa(os.Getppid()) {
			if err := applyNodeRoot(); err != nil {
				fmt.Fprintf(os.Stderr, "framework: %v\n", err)
				os.Exit(1)
			}
		}
		return
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "framework: locate this program to re-run it in a mount namespace: %v\n", err)
		os.Exit(1)
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), nodeNSEnv+"="+strconv.Itoa(os.Getpid()))
	// Go makes "/" recursively private right after the unshare, so the copy starts detached
	// from the machine's peer groups; applyNodeRoot then sets the chosen propagation.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "framework: start in a mount namespace of its own: %v\n", err)
		os.Exit(1)
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		os.Exit(exit.ExitCode())
	default:
		fmt.Fprintf(os.Stderr, "framework: %v\n", err)
		os.Exit(1)
	}
}

// applyNodeRoot gives "/" and every mount below it the chosen propagation. Shared here means
// new peer groups inside this namespace only: the copy was made private first, so nothing
// mounted here propagates to the machine.
func applyNodeRoot() error {
	flag := uintptr(unix.MS_PRIVATE)
	if NodeRoot() == "shared" {
		flag = unix.MS_SHARED
	}
	if err := unix.Mount("", "/", "", flag|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make / %s in the harness's mount namespace: %w", NodeRoot(), err)
	}
	return nil
}
