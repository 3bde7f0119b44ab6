// Command compat32 makes one system call through the kernel's 32-bit entry point (int
// 0x80, getpid) from a 64-bit process and prints what it returned, or that the calling
// thread vanished: a seccomp filter without the 32-bit architecture kills the thread
// (libseccomp's bad-architecture action), not the process, so the call is made on a thread
// of its own and the main one reports.
package main

import (
	"fmt"
	"runtime"
	"time"
)

func compat32Getpid() int32

func main() {
	res := make(chan int32, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread may not come back
		res <- compat32Getpid()
	}()
	select {
	case r := <-res:
		fmt.Printf("compat32-getpid=%d\n", r)
	case <-time.After(3 * time.Second):
		fmt.Println("compat32-thread-gone")
	}
}
