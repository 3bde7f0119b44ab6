package shim

import (
	"runtime/debug"
	"sync"
	"time"
)

// releaseAfter is how long after the last create the shim hands back the memory creates used.
const releaseAfter = time.Second

var release struct {
	mu sync.Mutex
	t  *time.Timer
}

// releaseMemorySoon returns the heap that creates grew (the connection to containerd, the
// decoded spec and blobs) to the kernel once creates have been quiet for releaseAfter. A
// pod's shim lives as long as the pod and is idle nearly all that time; left to itself the
// Go runtime keeps those pages resident for minutes, and per pod they are most of what this
// shim costs over runc's own. Off the create's path: the timer's goroutine pays the GC.
func releaseMemorySoon() {
	release.mu.Lock()
	defer release.mu.Unlock()
	if release.t == nil {
		release.t = time.AfterFunc(releaseAfter, debug.FreeOSMemory)
		return
	}
	release.t.Reset(releaseAfter)
}
