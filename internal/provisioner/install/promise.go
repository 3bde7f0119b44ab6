package install

import (
	"context"
	"fmt"
	"strings"

	"brewlet.sh/brewlet/internal/golden"
	"brewlet.sh/brewlet/internal/promise"
	"brewlet.sh/brewlet/internal/vocab"
)

// keepsPromise refuses a generation that removes or changes what the generation the node
// serves of the same epoch promised its applications (internal/promise: version lines, the
// account, PATH and its executables, libraries and their symbol versions, interpreters, the
// environment), before current can move to it, unless the RuntimeImage accepts exactly this
// digest as breaking. The first generation of an epoch, or a node serving none, has no
// promise to keep. Both trees are read from the layer cache; nothing in them runs.
func (in *Installer) keepsPromise(ctx context.Context, req Request, digest string, root *golden.Root, env []string) error {
	if req.Rollback {
		return nil
	}
	cur, err := in.Layout.Current(req.ID)
	if err != nil || cur.Epoch != req.Epoch || cur.Generation >= req.Generation {
		return nil
	}
	prev, err := in.Layout.ReadGeneration(req.ID, cur)
	if err != nil {
		return fmt.Errorf("read generation %d of %s to compare its promise: %w", cur.Generation, req.ID, err)
	}
	dirs := make([]string, len(prev.Layers))
	for i, l := range prev.Layers {
		dirs[i] = in.Layout.LayerDir(strings.TrimPrefix(l, "sha256:"))
	}
	prevRoot, err := golden.IndexDirLayersContext(ctx, dirs)
	if err != nil {
		return fmt.Errorf("read generation %d of %s to compare its promise: %w", cur.Generation, req.ID, err)
	}
	old, err := promise.Read(prevRoot.FS(), promise.Input{UID: prev.UID, GID: prev.GID, Env: prev.Env})
	if err != nil {
		return fmt.Errorf("read what generation %d of %s promises: %w", cur.Generation, req.ID, err)
	}
	now, err := promise.Read(root.FS(), promise.Input{UID: req.UID, GID: req.GID, Env: env})
	if err != nil {
		return fmt.Errorf("read what generation %d of %s promises: %w", req.Generation, req.ID, err)
	}
	changes := promise.Diff(old, now)
	if len(promise.Breaking(changes)) == 0 || req.AcceptBreaking == digest {
		return nil
	}
	return vocab.Errorf(vocab.ReasonRuntimePromiseBroken,
		"runtime %s generation %d (%s) breaks what generation %d promised: %s; the node keeps generation %d. Build an image that keeps the promise (brewlet runtime diff shows the changes), or accept this one digest in the RuntimeImage (spec.compatibility.acceptBreaking: %s)",
		req.ID, req.Generation, digest, cur.Generation, promise.Summary(changes, 5), cur.Generation, digest)
}
