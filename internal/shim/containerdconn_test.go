package shim

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// The connection opened while a sandbox starts is the one the next create uses, once; a
// connection that cannot reach containerd any more is replaced, and an untaken one closes.
func TestConnCacheHandsTheWarmConnectionOnce(t *testing.T) {
	startFakeContainerd(t)
	addr := os.Getenv("GRPC_ADDRESS")
	var c connCache
	c.warm(addr)
	warm := c.held()
	if warm == nil {
		t.Fatal("warm opened no connection")
	}
	c.warm(addr) // a second sandbox create (a restarted pod sandbox) keeps the one there is
	if c.held() != warm {
		t.Fatal("warm replaced a held connection")
	}
	got, err := c.take(addr)
	if err != nil || got != warm {
		t.Fatalf("take = %p, %v; want the warm connection %p", got, err, warm)
	}
	if _, err := containerImage(context.Background(), got, "nothing"); err == nil {
		t.Error("the fake containerd answered for an unknown container")
	} else if got.GetState() == connectivity.Shutdown {
		t.Error("the warm connection was closed")
	}
	_ = got.Close()
	again, err := c.take(addr)
	if err != nil || again == warm {
		t.Fatalf("second take = %p, %v; want a connection of its own", again, err)
	}
	_ = again.Close()

	t.Run("an untaken connection closes after the idle time", func(t *testing.T) {
		defer func(d time.Duration) { warmConnIdle = d }(warmConnIdle)
		warmConnIdle = 50 * time.Millisecond
		var c connCache
		c.warm(addr)
		conn := c.held()
		deadline := time.Now().Add(5 * time.Second)
		for conn.GetState() != connectivity.Shutdown {
			if time.Now().After(deadline) {
				t.Fatal("the idle connection was not closed")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if c.held() != nil {
			t.Error("the cache still holds the closed connection")
		}
	})

	t.Run("a connection to a containerd that went away is not handed out", func(t *testing.T) {
		var c connCache
		gone := filepath.Join(t.TempDir(), "gone.sock")
		c.warm(gone)
		conn := c.held()
		deadline := time.Now().Add(5 * time.Second)
		for conn.GetState() != connectivity.TransientFailure {
			if time.Now().After(deadline) {
				t.Fatalf("state %v, want TransientFailure", conn.GetState())
			}
			time.Sleep(10 * time.Millisecond)
		}
		got, err := c.take(addr)
		if err != nil || got == conn {
			t.Fatalf("take = %p, %v; want a new connection, not the failed %p", got, err, conn)
		}
		if conn.GetState() != connectivity.Shutdown {
			t.Error("the failed connection was not closed")
		}
		_ = got.Close()
	})
}

// held is the connection the cache holds now.
func (c *connCache) held() *grpc.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}
