package cli

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/spf13/cobra"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/artifact/ociimage"
	"brewlet.sh/brewlet/internal/golden"
	"brewlet.sh/brewlet/internal/registry"
)

func newRuntimeCmd() *cobra.Command {
	c := &cobra.Command{Use: "runtime", Short: "Work with runtime (golden) images"}
	c.AddCommand(newRuntimeBuildCmd(), newRuntimeDiffCmd(), newRuntimeSignCmd(), newRuntimeKeygenCmd())
	return c
}

type runtimeBuildOpts struct {
	rootfs   []string
	platform string
	uid, gid int64
	envs     []string
	insecure bool
}

func newRuntimeBuildCmd() *cobra.Command {
	o := &runtimeBuildOpts{}
	c := &cobra.Command{
		Use:   "build REF",
		Short: "Build a runtime image from a root filesystem, validate it and push it",
		Long: `Builds a runtime image from root directories or tar archives (one layer each), applies the
runtime image rules (PATH, account files defining --uid/--gid, no setuid/setgid files or
file capabilities) and pushes it. The last line printed is REF@sha256:<digest>; approve it
with a RuntimeImage whose spec.source.image is that reference and spec.user is --uid/--gid.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	f := c.Flags()
	f.StringArrayVar(&o.rootfs, "rootfs", nil, "root filesystem layer: a directory or a tar archive, optionally gzip-compressed (repeatable, lowest first; a rotation that changes one layer ships only that layer)")
	f.Int64Var(&o.uid, "uid", 0, "non-root user ID applications run as (defined in the image's /etc/passwd if it has one)")
	f.Int64Var(&o.gid, "gid", 0, "non-root group ID applications run as")
	f.StringArrayVar(&o.envs, "env", nil, "config Env entry NAME=VALUE, e.g. PATH=/usr/local/bin:/usr/bin:/bin (repeatable)")
	f.StringVar(&o.platform, "platform", "linux/amd64", "os/arch of the root filesystem")
	f.BoolVar(&o.insecure, "insecure", false, "allow plain HTTP to a non-loopback registry")
	_ = c.MarkFlagRequired("rootfs")
	_ = c.MarkFlagRequired("uid")
	_ = c.MarkFlagRequired("gid")
	return c
}

func (o *runtimeBuildOpts) run(cmd *cobra.Command, refStr string) error {
	if o.uid <= 0 || o.gid <= 0 {
		return usageError{fmt.Errorf("--uid and --gid must be non-zero: applications never run as root")}
	}
	for _, e := range o.envs {
		if !strings.Contains(e, "=") {
			return usageError{fmt.Errorf("--env %q: want NAME=VALUE", e)}
		}
	}
	p, err := registry.ParsePlatform(o.platform)
	if err != nil {
		return usageError{err}
	}
	ref, err := registry.Reference(refStr, o.insecure)
	if err != nil {
		return err
	}
	var tars [][]byte
	var readers []io.Reader
	for _, r := range o.rootfs {
		b, err := rootfsTar(r)
		if err != nil {
			return fmt.Errorf("--rootfs %s: %w", r, err)
		}
		tars, readers = append(tars, b), append(readers, bytes.NewReader(b))
	}
	root, err := golden.IndexTarLayers(readers)
	if err != nil {
		return err
	}
	if _, err := golden.Validate(root, o.envs, golden.User{UID: o.uid, GID: o.gid}); err != nil {
		return err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, b := range tars {
		layer, err := ociimage.OCILayer(b)
		if err != nil {
			return err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = v1.Config{Env: o.envs}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	opts, err := registryOptions(cmd, o.insecure)
	if err != nil {
		return err
	}
	ch, wait := progress(cmd.ErrOrStderr(), "pushing")
	opts = append(opts, remote.WithProgress(ch))
	err = remote.Write(ref, img, opts...)
	wait()
	if err != nil {
		return registry.CLIHints.Classify(fmt.Errorf("push %s: %w", ref, err), ref.Context().RegistryStr(), "")
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s@%s\n", ref.Context().Name(), d)
	return nil
}

// rootfsTar returns an uncompressed tar of a root directory or archive.
func rootfsTar(p string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return artifact.TreeTar(p, "")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	}
	return b, nil
}
