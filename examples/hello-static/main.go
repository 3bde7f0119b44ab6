// Command hello-static is a small web app for Brewlet's distroless runtime (static): one
// statically linked binary (CGO_ENABLED=0) in an artifact holding only /app. The runtime
// gives it CA certificates, time zones and a release file, nothing else: no shell, no PATH,
// no account files, so its entrypoint is absolute.
//
//	/app/hello-static/hello          serve HTTP on $PORT (8080)
//	/app/hello-static/hello --once   print the answer and exit
package main

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

func answer() string {
	release := "unknown"
	if b, err := os.ReadFile("/etc/brewlet-runtime-release"); err == nil {
		release = strings.TrimSpace(string(b))
	}
	cas := "none"
	if pool, err := x509.SystemCertPool(); err == nil {
		cas = fmt.Sprint(len(pool.Subjects())) //nolint:staticcheck // a count is all we show
	}
	zone := "no tzdata"
	if loc, err := time.LoadLocation("Europe/Paris"); err == nil {
		zone = time.Date(2026, 7, 1, 12, 0, 0, 0, loc).Format("Europe/Paris MST")
	}
	path, ok := os.LookupEnv("PATH")
	if !ok {
		path = "(none)"
	}
	return fmt.Sprintf("hello from go %s (static)\nruntime: %s\nuid: %d gid: %d\nPATH: %s\nca certificates: %s, time zone: %s\n",
		runtime.Version(), release, os.Getuid(), os.Getgid(), path, cas, zone)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--once" {
		fmt.Print(answer())
		return
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	go func() { // PID 1 ignores SIGTERM otherwise
		s := make(chan os.Signal, 1)
		signal.Notify(s, syscall.SIGTERM)
		<-s
		os.Exit(0)
	}()
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, answer())
	})
	fmt.Println("listening on :" + port)
	srv := &http.Server{Addr: ":" + port, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
