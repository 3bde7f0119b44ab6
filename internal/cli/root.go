// Package cli implements the brewlet command: building, pushing, inspecting and verifying
// application artifacts and runtime images, and reporting rotations (status).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"

	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/vocab"
)

// Main runs the CLI and returns the process exit code: 0, 1 for a refusal or failure (its
// reason code leads the message), 2 for bad usage.
func Main(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		if vocab.ReasonOf(err) == "" && isUsage(err) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "brewlet",
		Short:         "Build, push, inspect and verify Brewlet application artifacts and runtime images",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringArray("ca-file", nil, "a PEM file of authorities trusted for registries besides the system's (repeatable)")
	root.AddCommand(newPushCmd(), newInspectCmd(), newVerifyCmd(), newRuntimeCmd(), newStatusCmd())
	return root
}

// progress prints registry upload/download progress on stderr for transfers over 1 MiB.
func progress(w io.Writer, what string) (chan v1.Update, func()) {
	ch := make(chan v1.Update, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var last time.Time
		var shown, finished bool
		for u := range ch {
			if u.Total < 1<<20 || finished || (time.Since(last) < 500*time.Millisecond && u.Complete != u.Total) {
				continue
			}
			last, shown, finished = time.Now(), true, u.Complete == u.Total
			fmt.Fprintf(w, "\r%s %6.1f / %6.1f MiB %3d%%", what, float64(u.Complete)/(1<<20), float64(u.Total)/(1<<20), u.Complete*100/u.Total)
		}
		if shown {
			fmt.Fprintln(w)
		}
	}()
	return ch, func() { <-done }
}

func stdinOrFile(p string) ([]byte, error) {
	if p == "-" {
		return io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	}
	return os.ReadFile(p)
}

// registryOptions are the registry client options of a command: the plain-HTTP policy, the
// authorities of --ca-file and the Docker config's credentials (helpers included).
func registryOptions(cmd *cobra.Command, insecure bool, extra ...remote.Option) ([]remote.Option, error) {
	caFiles, err := cmd.Flags().GetStringArray("ca-file")
	if err != nil {
		return nil, usageError{err}
	}
	return registry.ClientOptions(cmd.Context(), insecure, caFiles, extra...)
}
