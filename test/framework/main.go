package framework

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"brewlet.sh/brewlet/test/framework/hostops"
)

// Main runs a package's tests so that harness components never outlive them: it first
// removes what killed earlier runs left behind, cleans up on SIGINT/SIGTERM, and shortly
// before go test's own -timeout would abort the binary (skipping every t.Cleanup) it dumps
// the goroutines, cleans up and fails the run itself. The tests run in a mount namespace of
// their own (EnterNodeMountNamespace), with DOCKER_CONFIG at the process's own Docker config
// (registrytrust.go).
//
//	func TestMain(m *testing.M) { framework.Main(m) }
func Main(m *testing.M) {
	hostops.EnterNodeMountNamespace()
	flag.Parse()
	for _, err := range Sweep() {
		fmt.Fprintf(os.Stderr, "framework: removing leftovers of an earlier run: %v\n", err)
	}
	// Every default registry's credentials, for the Installers and CLIs of the tests (and
	// nothing of the machine's own ~/.docker).
	if err := useProcessDockerConfig(); err != nil {
		fmt.Fprintf(os.Stderr, "framework: %v\n", err)
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "framework: %v: removing test components\n", s)
		CleanupAll()
		os.Exit(2)
	}()
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && d > 0 {
			margin := 30 * time.Second
			if d < 2*margin {
				margin = d / 4
			}
			time.AfterFunc(d-margin, func() {
				fmt.Fprintf(os.Stderr, "framework: test binary about to hit -timeout %s; goroutines:\n", d)
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
				CleanupAll()
				fmt.Fprintln(os.Stderr, "FAIL: timeout (components removed)")
				os.Exit(1)
			})
		}
	}
	code := m.Run()
	CleanupAll()
	os.Exit(code)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
