package framework

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ServeRestarts lets a program on this machine restart the node's containerd as
// `systemctl restart containerd` would on a real node (synchronously, reporting failure):
// it returns the shell command that asks, for the chart's
// provisioner.containerd.restartCommand (the agent runs it chrooted into the machine's
// root, which its pod mounts read-only). The command talks to this process through two
// FIFOs, which a read-only mount still lets it write: a request line, then the outcome
// ("ok" or the error). This process restarts containerd (RestartContainerd) while the test
// runs; once it is gone the command blocks until the agent's timeout ends it.
func (n *Node) ServeRestarts(t TB) string {
	t.Helper()
	dir := filepath.Join(n.Dir, "restart-requests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	req, res := filepath.Join(dir, "request"), filepath.Join(dir, "result")
	for _, p := range []string{req, res} {
		if err := syscall.Mkfifo(p, 0o622); err != nil {
			t.Fatal(err)
		}
	}
	// Read-write opens never wait for the other side; the reads go through Go's poller, so
	// a deadline ends them.
	in, err := os.OpenFile(req, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(res, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		lines := bufio.NewReader(in)
		for ctx.Err() == nil {
			_ = in.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := lines.ReadString('\n'); err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					return
				}
				continue
			}
			result := "ok"
			if err := n.RestartContainerd(ctx); err != nil {
				result = strings.ReplaceAll(err.Error(), "\n", " ")
			}
			n.restarts.Add(1)
			_, _ = fmt.Fprintln(out, result)
		}
	}()
	// Registered after the node's own cleanup, so it runs first: no restart while the node
	// is taken down.
	t.Cleanup(func() {
		cancel()
		<-done
		_ = in.Close()
		_ = out.Close()
	})
	return fmt.Sprintf(`echo restart > %s && read -r r < %s && if [ "$r" != ok ]; then echo "$r" >&2; exit 1; fi`, req, res)
}

// Restarts counts the restarts ServeRestarts made.
func (n *Node) Restarts() int { return int(n.restarts.Load()) }
