package shim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd/api/types"
	"golang.org/x/sys/unix"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/hoststate"
	"brewlet.sh/brewlet/internal/vocab"
)

// snapshotLayers splits containerd's overlay mount of the artifact into the launch layer
// (the top lower directory) and the application layers below it, lowest first.
func snapshotLayers(rootfs []*types.Mount) (launch string, app []string, m *types.Mount, err error) {
	if len(rootfs) != 1 || rootfs[0].Type != "overlay" {
		return "", nil, nil, vocab.Errorf(vocab.ReasonUnsupportedArtifact,
			"the image's root filesystem is not an overlay of several layers; a Brewlet application artifact has app layers and a launch layer (build it with 'brewlet push')")
	}
	m = rootfs[0]
	for _, o := range m.Options {
		if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
			dirs := strings.Split(v, ":")
			if len(dirs) < 2 {
				break
			}
			app = slices.Clone(dirs[1:])
			slices.Reverse(app)
			return dirs[0], app, m, nil
		}
	}
	return "", nil, nil, vocab.Errorf(vocab.ReasonUnsupportedArtifact, "the image has fewer than two layers; a Brewlet application artifact has app layers and a launch layer")
}

// readLaunch reads launch.json from the launch layer, which must hold nothing else, and
// returns it with the sha256 of its bytes (hex), which keys the image verdict cache.
func readLaunch(dir string) (*artifact.Launch, string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", err
	}
	if len(ents) != 1 || ents[0].Name() != artifact.LaunchFile || !ents[0].Type().IsRegular() {
		return nil, "", vocab.Errorf(vocab.ReasonUnsupportedArtifact,
			"the image's top layer is not a launch layer holding only %s: this is not a Brewlet application artifact (build it with 'brewlet push')", artifact.LaunchFile)
	}
	f, err := os.OpenFile(filepath.Join(dir, artifact.LaunchFile), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, artifact.MaxLaunchSize+1))
	if err != nil {
		return nil, "", err
	}
	l, err := artifact.ParseLaunch(b)
	sum := sha256.Sum256(b)
	return l, hex.EncodeToString(sum[:]), err
}

// validateApp applies the layer content rules to the application layers within
// appValidationTimeout, remembering every verdict about the layers themselves per layer
// set (see cachedValidation).
func validateApp(ctx context.Context, l hoststate.Layout, app []string) error {
	lim := artifact.DefaultLimits()
	label, err := snapshotLabel(app)
	if err != nil {
		return err
	}
	lim.NodeLabel = label
	return cachedValidation(ctx, filepath.Join(l.State, "verdicts"), app, lim)
}

// snapshotLabel is the SELinux label the node's policy gives containerd's snapshots: the
// label of the overlay snapshotter's snapshots directory (".../snapshots/<n>/fs" are the
// layers), which containerd made and no layer can touch. "" on nodes without labels.
func snapshotLabel(app []string) (string, error) {
	if len(app) == 0 {
		return "", nil
	}
	dir := filepath.Dir(filepath.Dir(app[0]))
	for _, a := range app[1:] {
		if filepath.Dir(filepath.Dir(a)) != dir {
			// Layers from two snapshot stores: no one label is the node's.
			return "", nil
		}
	}
	return artifact.ReadLabel(dir)
}

// appMask returns a layer holding an opaque, empty /app: placed between the application
// and the runtime layers, it hides whatever the runtime ships in /app.
func appMask(l hoststate.Layout) (string, error) {
	dir := filepath.Join(l.State, "masks", "hide-app")
	app := filepath.Join(dir, artifact.AppDir)
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(app, "trusted.overlay.opaque", buf); err == nil && string(buf[:n]) == "y" {
		return dir, nil // made by an earlier container: one syscall per create
	}
	if err := os.MkdirAll(app, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err := unix.Lsetxattr(app, "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		return "", fmt.Errorf("cannot mark %s opaque to hide the runtime's /app: %w", app, err)
	}
	return dir, nil
}

// composeLowerdirs rewrites the overlay's lower directories: application layers (launch
// layer dropped), the /app mask, then the runtime generation's layers. containerd's upper
// and work directories stay, so the writable layer remains containerd's.
func composeLowerdirs(m *types.Mount, app []string, mask string, runtime []string) {
	lower := slices.Clone(app)
	slices.Reverse(lower) // overlay lists the top layer first
	lower = append(lower, mask)
	rt := slices.Clone(runtime)
	slices.Reverse(rt)
	lower = append(lower, rt...)
	for i, o := range m.Options {
		if strings.HasPrefix(o, "lowerdir=") {
			m.Options[i] = "lowerdir=" + strings.Join(lower, ":")
		}
	}
}
