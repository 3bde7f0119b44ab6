package cli

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"runtime"
	"strconv"
	"strings"
	"testing/fstest"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"

	"brewlet.sh/brewlet/internal/golden"
	"brewlet.sh/brewlet/internal/promise"
	"brewlet.sh/brewlet/internal/registry"
	"brewlet.sh/brewlet/internal/vocab"
)

// Bounds of reading one runtime image for its promise: files are held in memory, ELF
// objects whole (the ones a manifest reads), everything else as names and modes.
const (
	maxDiffEntries  = 500_000
	maxDiffELFBytes = 1 << 30
	maxDiffSmall    = 1 << 20
)

type runtimeDiffOpts struct {
	output   string
	platform string
	uid, gid int64
	insecure bool
}

func newRuntimeDiffCmd() *cobra.Command {
	o := &runtimeDiffOpts{}
	c := &cobra.Command{
		Use:   "diff OLD NEW",
		Short: "Say what NEW changes of what runtime image OLD promises its applications",
		Long: `Read both runtime images' files (nothing in them runs) and compare what a runtime ID
promises: the version lines, the user and group with their accounts, PATH and its
executables, the shared libraries with their sonames and symbol versions, the program
interpreters and the environment. Every removal or change breaks the promise; additions do
not. Exits 0 when NEW keeps OLD's promise and 1 with RuntimePromiseBroken when it does not
(docs/rotation.md, "What a rotation may change").`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.output != "text" && o.output != "json" {
				return usageError{fmt.Errorf("-o must be text or json, not %q", o.output)}
			}
			var ms [2]promise.Manifest
			for i, ref := range args {
				m, err := o.manifest(cmd, ref)
				if err != nil {
					return err
				}
				ms[i] = m
			}
			changes := promise.Diff(ms[0], ms[1])
			if o.output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(struct {
					Old, New promise.Manifest
					Changes  []promise.Change
					Breaking bool
				}{ms[0], ms[1], changes, len(promise.Breaking(changes)) > 0}); err != nil {
					return err
				}
			} else {
				printChanges(cmd.OutOrStdout(), args, changes)
			}
			if b := promise.Breaking(changes); len(b) > 0 {
				return vocab.Errorf(vocab.ReasonRuntimePromiseBroken, "%s breaks %d promise(s) of %s: %s; keep them in the new image, or give it a runtime ID of its own",
					args[1], len(b), args[0], promise.Summary(changes, 3))
			}
			return nil
		},
	}
	c.Flags().StringVarP(&o.output, "output", "o", "text", "text or json")
	c.Flags().StringVar(&o.platform, "platform", "linux/"+runtime.GOARCH, "the platform of a multi-platform image to compare")
	c.Flags().Int64Var(&o.uid, "uid", 0, "the user applications run as: the RuntimeImage's spec.user.uid (default: the image config's user, which runtime images built by brewlet runtime build leave unset)")
	c.Flags().Int64Var(&o.gid, "gid", 0, "the group applications run as: the RuntimeImage's spec.user.gid (default: the image config's group)")
	c.Flags().BoolVar(&o.insecure, "insecure", false, "allow plain HTTP to a non-loopback registry")
	return c
}

func printChanges(w io.Writer, refs []string, cs []promise.Change) {
	b := promise.Breaking(cs)
	fmt.Fprintf(w, "old  %s\nnew  %s\n", refs[0], refs[1])
	if len(b) == 0 {
		fmt.Fprintln(w, "the new image keeps the old one's promise")
	} else {
		fmt.Fprintf(w, "BREAKING (%d):\n", len(b))
	}
	for _, c := range b {
		fmt.Fprintf(w, "  %s\n", c)
	}
	var rest []promise.Change
	for _, c := range cs {
		if !c.Breaking {
			rest = append(rest, c)
		}
	}
	if len(rest) > 0 {
		fmt.Fprintf(w, "other changes (%d):\n", len(rest))
		for _, c := range rest {
			fmt.Fprintf(w, "  %s\n", c)
		}
	}
}

// manifest fetches ref and reads its promise.
func (o *runtimeDiffOpts) manifest(cmd *cobra.Command, refStr string) (promise.Manifest, error) {
	ref, err := registry.Reference(refStr, o.insecure)
	if err != nil {
		return promise.Manifest{}, usageError{err}
	}
	opts, err := registryOptions(cmd, o.insecure)
	if err != nil {
		return promise.Manifest{}, err
	}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return promise.Manifest{}, registry.CLIHints.Classify(fmt.Errorf("fetch %s: %w", ref, err), ref.Context().RegistryStr(), "")
	}
	var img v1.Image
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return promise.Manifest{}, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return promise.Manifest{}, err
		}
		want, err := v1.ParsePlatform(o.platform)
		if err != nil {
			return promise.Manifest{}, usageError{err}
		}
		d, err := golden.SelectPlatform(im, *want)
		if err != nil {
			return promise.Manifest{}, err
		}
		if img, err = idx.Image(d.Digest); err != nil {
			return promise.Manifest{}, err
		}
	} else if img, err = desc.Image(); err != nil {
		return promise.Manifest{}, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return promise.Manifest{}, fmt.Errorf("read %s's config: %w", ref, err)
	}
	in := promise.Input{UID: o.uid, GID: o.gid, Env: cfg.Config.Env}
	if in.UID == 0 || in.GID == 0 {
		u, g := numericUser(cfg.Config.User)
		in.UID, in.GID = max(in.UID, u), max(in.GID, g)
	}
	fsys, err := imageFS(img)
	if err != nil {
		return promise.Manifest{}, fmt.Errorf("read %s's files: %w", ref, err)
	}
	return promise.Read(fsys, in)
}

// numericUser reads "uid:gid" or "uid" of an image config (0 for a name or nothing).
func numericUser(u string) (uid, gid int64) {
	a, b, _ := strings.Cut(u, ":")
	uid, _ = strconv.ParseInt(a, 10, 64)
	gid, _ = strconv.ParseInt(b, 10, 64)
	return uid, gid
}

// imageFS is the image's flattened file tree in memory, with its links: ELF objects and
// small text files with their bytes, everything else by name and mode.
func imageFS(img v1.Image) (fs.FS, error) {
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	fsys := fstest.MapFS{}
	tr := tar.NewReader(rc)
	held, entries := int64(0), 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fsys, nil
		}
		if err != nil {
			return nil, err
		}
		if entries++; entries > maxDiffEntries {
			return nil, vocab.Errorf(vocab.ReasonLimitExceeded, "the image holds more than %d files", maxDiffEntries)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if name == "" || name == "." {
			continue
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			fsys[name] = &fstest.MapFile{Mode: fs.ModeDir | mode}
		case tar.TypeSymlink:
			fsys[name] = &fstest.MapFile{Mode: fs.ModeSymlink | 0o777, Data: []byte(h.Linkname)}
		case tar.TypeLink:
			if t, ok := fsys[strings.TrimPrefix(path.Clean("/"+h.Linkname), "/")]; ok {
				fsys[name] = t
			}
		case tar.TypeReg:
			f := &fstest.MapFile{Mode: mode}
			head := make([]byte, min(h.Size, 4))
			if _, err := io.ReadFull(tr, head); err != nil {
				return nil, err
			}
			object := string(head) == "\x7fELF"
			if object && h.Size > maxDiffELFBytes-held {
				return nil, vocab.Errorf(vocab.ReasonLimitExceeded, "the image's ELF objects hold more than %d bytes together (at /%s)", maxDiffELFBytes, name)
			}
			if object || h.Size <= maxDiffSmall {
				rest, err := io.ReadAll(io.LimitReader(tr, h.Size-int64(len(head))))
				if err != nil {
					return nil, err
				}
				f.Data = append(head, rest...)
				held += int64(len(f.Data))
			}
			fsys[name] = f
		}
	}
}
