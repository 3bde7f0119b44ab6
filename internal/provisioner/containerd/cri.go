package containerd

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"brewlet.sh/brewlet/internal/vocab"
)

// HandlerHealth returns a health check that asks containerd's CRI whether the brewlet
// runtime handler is configured.
func HandlerHealth(socket string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		st, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			return fmt.Errorf("CRI status from %s: %w", socket, err)
		}
		for _, h := range st.RuntimeHandlers {
			if h.Name == vocab.RuntimeClassName {
				return nil
			}
		}
		return fmt.Errorf("containerd at %s does not list the %s runtime handler", socket, vocab.RuntimeClassName)
	}
}
