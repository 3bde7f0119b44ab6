package shim

import (
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	json "github.com/go-json-experiment/json/v1"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"google.golang.org/grpc"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/golden"
)

// maxBlob bounds the manifest, index and config blobs read at container create.
const maxBlob = 4 << 20

// checkImage recognizes the container's image as a Brewlet artifact from its manifest and
// checks that the image config mirrors launch.json. The shim sees only the snapshot mounts,
// so it asks containerd's own API (GRPC_ADDRESS, which containerd gives every shim) which
// image the container record names and what that image's target digest is: both can change
// between creates (a tag re-pointed and pulled), so they are asked every time. What follows
// from the digest is fixed by it, so the verdict on the blobs (a few KiB read from the
// content store) is remembered per node in cacheDir (imagecache.go): a create whose image
// this shim binary already checked against the same launch.json reads no blob.
func checkImage(ctx context.Context, cacheDir, containerID string, launch *artifact.Launch, launchSum string) error {
	c := startImageCheck(ctx, cacheDir, containerID)
	defer c.stop()
	c.judge(launch, launchSum)
	return c.wait()
}

// imageCheck is checkImage running beside the create's node-local steps: its two
// containerd lookups are the slowest part of the shim's own work (about 4 ms one at a time,
// tens of ms while containerd starts other containers), and nothing the node-local steps
// decide depends on them. The lookups start before launch.json is read; the verdict, which
// needs it, once judge hands it over. Nothing is handed to runc before its result is in.
type imageCheck struct {
	cancel context.CancelFunc
	launch chan imageLaunch // judge's one value
	done   chan struct{}
	err    error
}

type imageLaunch struct {
	launch *artifact.Launch
	sum    string
}

// startImageCheck starts the check's lookups in a goroutine of their own.
func startImageCheck(ctx context.Context, cacheDir, containerID string) *imageCheck {
	ctx, cancel := context.WithCancel(ctx)
	c := &imageCheck{cancel: cancel, launch: make(chan imageLaunch, 1), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.err = c.run(ctx, cacheDir, containerID)
	}()
	return c
}

func (c *imageCheck) run(ctx context.Context, cacheDir, containerID string) error {
	addr := os.Getenv("GRPC_ADDRESS")
	if addr == "" {
		return errors.New("containerd did not give the shim its address (GRPC_ADDRESS); cannot check the image")
	}
	ns, _ := namespaces.Namespace(ctx)
	if ns == "" {
		ns = "k8s.io"
	}
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(ctx, ns), 10*time.Second)
	defer cancel()
	conn, err := containerdConns.take(addr)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	image, err := containerImage(ctx, conn, containerID)
	if err != nil {
		return fmt.Errorf("look up container %s in containerd: %w", containerID, err)
	}
	mediaType, target, err := imageTarget(ctx, conn, image)
	if err != nil {
		return fmt.Errorf("look up image %s in containerd: %w", image, err)
	}
	var l imageLaunch
	select {
	case l = <-c.launch:
	case <-ctx.Done():
		return ctx.Err()
	}
	key := imageKey{Checks: imageChecksVersion, Shim: exeIdentity(), Platform: imagePlatform,
		MediaType: mediaType, Target: target, Launch: l.sum}
	cache := key.Shim != "" && cacheDir != ""
	if cache {
		if v, ok := readImageVerdict(cacheDir, key); ok {
			return v.err()
		}
	}
	err = checkBlobs(ctx, conn, key.MediaType, key.Target, l.launch)
	if v, ok := imageVerdictOf(key, err); ok && cache {
		// The verdict stands whether or not it is remembered: a failed write costs only
		// another read of the blobs later.
		_ = storeImageVerdict(cacheDir, v)
	}
	return err
}

// judge hands the check the container's launch.json (parsed, and its hash); the verdict
// waits for it. It is called at most once.
func (c *imageCheck) judge(launch *artifact.Launch, sum string) {
	c.launch <- imageLaunch{launch: launch, sum: sum}
}

// wait returns the check's result once it is in; judge must have been called (or stop).
func (c *imageCheck) wait() error {
	<-c.done
	return c.err
}

// before returns the image check's refusal if it has one, else err: the image was judged
// before the node's state when the steps ran one after the other, and a refusal should not
// depend on which finished first.
func (c *imageCheck) before(err error) error {
	if ierr := c.wait(); ierr != nil {
		return ierr
	}
	return err
}

// stop abandons the check (a create refused before its result mattered) and waits for the
// goroutine, so no lookup outlives the create.
func (c *imageCheck) stop() {
	c.cancel()
	<-c.done
}

// checkBlobs reads the manifest (through the index, for this node's platform) and config
// of the image whose target is dg, and checks them against launch.
func checkBlobs(ctx context.Context, content *grpc.ClientConn, mt, dg string, launch *artifact.Launch) error {
	b, err := readBlob(ctx, content, dg)
	if err != nil {
		return err
	}
	if types.MediaType(mt).IsIndex() {
		var idx v1.IndexManifest
		if err := json.Unmarshal(b, &idx); err != nil {
			return fmt.Errorf("image index %s: %w", dg, err)
		}
		d, err := golden.SelectPlatform(&idx, v1.Platform{OS: "linux", Architecture: goruntime.GOARCH})
		if err != nil {
			return err
		}
		if b, err = readBlob(ctx, content, d.Digest.String()); err != nil {
			return err
		}
	}
	var m v1.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("image manifest: %w", err)
	}
	if _, err := artifact.CheckManifest(&m); err != nil {
		return err
	}
	cb, err := readBlob(ctx, content, m.Config.Digest.String())
	if err != nil {
		return err
	}
	var cf v1.ConfigFile
	if err := json.Unmarshal(cb, &cf); err != nil {
		return fmt.Errorf("image config: %w", err)
	}
	return artifact.CheckConfigMirror(launch, cf.Config)
}
