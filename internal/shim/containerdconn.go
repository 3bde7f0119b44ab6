package shim

import (
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// connBuffer is the read and write buffer of the shim's connection to containerd.
const connBuffer = 4 << 10

// warmConnIdle is how long a connection opened ahead of a create waits for one.
var warmConnIdle = 10 * time.Second

// connCache holds at most one connection to containerd, opened while the pod's sandbox
// starts (warm), so that the first container create of the pod does not pay for the
// dial and the HTTP/2 handshake on its critical path: about 2.5 ms of the image check's
// 3.5 ms first lookup on the development machine, in a shim that never used gRPC before.
// A create takes the connection and closes it after use; without one it dials its own. An
// untaken connection closes after warmConnIdle, so an idle shim holds none.
type connCache struct {
	mu    sync.Mutex
	conn  *grpc.ClientConn
	timer *time.Timer
}

// containerdConns is the shim process's cache (one shim serves one pod).
var containerdConns connCache

// dialContainerd opens a connection to containerd's API at addr (lazily: the dial happens
// with the first call or Connect).
func dialContainerd(addr string) (*grpc.ClientConn, error) {
	// A handful of calls of a few KiB each: gRPC's default 32 KiB read and write buffers per
	// connection were the largest item of what a create allocated.
	return grpc.NewClient("unix://"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithReadBufferSize(connBuffer), grpc.WithWriteBufferSize(connBuffer))
}

// warm opens a connection ahead of a create if none is held, and starts connecting it.
func (c *connCache) warm(addr string) {
	if addr == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		return
	}
	conn, err := dialContainerd(addr)
	if err != nil {
		return // the create dials its own and reports the error
	}
	conn.Connect()
	c.conn = conn
	c.timer = time.AfterFunc(warmConnIdle, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.conn == conn {
			c.conn, c.timer = nil, nil
			_ = conn.Close()
		}
	})
}

// take returns the warm connection if there is a usable one, else a new one; the caller
// closes it.
func (c *connCache) take(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	conn := c.conn
	if conn != nil {
		c.timer.Stop()
		c.conn, c.timer = nil, nil
	}
	c.mu.Unlock()
	if conn != nil {
		switch conn.GetState() {
		case connectivity.Idle, connectivity.Connecting, connectivity.Ready:
			return conn, nil
		}
		// containerd went away since (a restart): start afresh rather than wait for the
		// connection's backoff.
		_ = conn.Close()
	}
	return dialContainerd(addr)
}
