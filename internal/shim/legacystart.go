package shim

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
	json "github.com/go-json-experiment/json/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// containerd 2.3 changed how a daemon starts a shim: it writes bootstrap parameters (a
// protobuf naming the instance, namespace and addresses) to the shim's stdin and reads a
// protobuf result back. containerd 2.0–2.2 pass the same facts as flags and environment,
// write the runtime options to stdin, and read JSON back. The shim library Brewlet builds
// with speaks only the new form, so on an older daemon every start would fail ("shim was
// started through the deprecated API"); LegacyStart answers the old form with the same
// manager, so one shim binary serves every supported containerd (docs/install.md,
// "containerd versions").

// maxStartInput bounds what a start reads from stdin (the library's own limit).
const maxStartInput = 10 << 20

// startFlags are the shim's flags, as the shim library defines them.
type startFlags struct {
	namespace, id, address, publishBinary string
	debug                                 bool
	action                                string
}

func parseStartFlags(args []string) (startFlags, bool) {
	var f startFlags
	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&f.debug, "debug", false, "")
	fs.Bool("v", false, "")
	fs.Bool("version", false, "")
	fs.Bool("info", false, "")
	fs.StringVar(&f.namespace, "namespace", "", "")
	fs.StringVar(&f.id, "id", "", "")
	fs.String("socket", "", "")
	fs.String("debug-socket", "", "")
	fs.String("bundle", "", "")
	fs.StringVar(&f.address, "address", "", "")
	fs.StringVar(&f.publishBinary, "publish-binary", "", "")
	if err := fs.Parse(args); err != nil {
		return f, false
	}
	f.action = fs.Arg(0)
	return f, true
}

// isBootstrap reports whether stdin holds containerd 2.3's bootstrap parameters for this
// shim (the check the shim library makes: old-style runtime options can decode as
// parameters, but never with this instance and namespace).
func isBootstrap(input []byte, f startFlags) bool {
	if len(input) == 0 {
		return false
	}
	var p bootapi.BootstrapParams
	if err := proto.Unmarshal(input, &p); err != nil {
		return false
	}
	return p.GetInstanceID() == f.id && p.GetNamespace() == f.namespace
}

// legacyParams turns an old-style start (flags, TTRPC_ADDRESS, runtime options on stdin)
// into the bootstrap parameters the manager takes. Old daemons have no shim socket
// directory setting: the manager uses its default.
func legacyParams(f startFlags, ttrpcAddress string, input []byte) (*bootapi.BootstrapParams, error) {
	p := &bootapi.BootstrapParams{InstanceID: f.id, Namespace: f.namespace, ContainerdGrpcAddress: f.address,
		ContainerdTtrpcAddress: ttrpcAddress, ContainerdBinary: f.publishBinary, LogLevel: bootapi.LogLevel_LOG_LEVEL_INFO}
	if f.debug {
		p.LogLevel = bootapi.LogLevel_LOG_LEVEL_DEBUG
	}
	if len(input) > 0 {
		opts := &anypb.Any{}
		if err := proto.Unmarshal(input, opts); err != nil {
			return nil, fmt.Errorf("runtime options on stdin: %w", err)
		}
		if err := p.AddExtension(opts); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// legacyResult is the JSON an old daemon reads from a shim's start.
type legacyResult struct {
	Version  int32  `json:"version"`
	Address  string `json:"address"`
	Protocol string `json:"protocol"`
}

// LegacyStart runs the start action for a containerd older than 2.3 and reports whether it
// did. For any other invocation it does nothing, except that a start of the new protocol
// has had its stdin read: it is handed back through os.Stdin for the shim library.
func LegacyStart(ctx context.Context, m shim.Shim, args []string, out io.Writer) (bool, error) {
	f, ok := parseStartFlags(args)
	if !ok || f.action != "start" || f.namespace == "" {
		return false, nil
	}
	input, err := io.ReadAll(io.LimitReader(os.Stdin, maxStartInput))
	if err != nil {
		return true, fmt.Errorf("read stdin: %w", err)
	}
	if isBootstrap(input, f) {
		return false, replaceStdin(input)
	}
	params, err := legacyParams(f, os.Getenv("TTRPC_ADDRESS"), input)
	if err != nil {
		return true, err
	}
	res, err := m.Start(namespaces.WithNamespace(ctx, f.namespace), params)
	if err != nil {
		return true, err
	}
	b, err := json.Marshal(legacyResult{Version: res.GetVersion(), Address: res.GetAddress(), Protocol: res.GetProtocol()})
	if err != nil {
		return true, err
	}
	_, err = out.Write(b)
	return true, err
}

// replaceStdin makes os.Stdin yield input again.
func replaceStdin(input []byte) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	go func() {
		_, _ = w.Write(input)
		_ = w.Close()
	}()
	os.Stdin = r
	return nil
}
