package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"

	"brewlet.sh/brewlet/internal/artifact"
	"brewlet.sh/brewlet/internal/artifact/ociimage"
	"brewlet.sh/brewlet/internal/registry"
)

type pushOpts struct {
	layers, args, envs, requires, platforms []string
	launchFile, entrypoint, workdir         string
	insecure                                bool
}

func newPushCmd() *cobra.Command {
	o := &pushOpts{}
	c := &cobra.Command{
		Use:   "push REF",
		Short: "Build an application artifact from /app content, validate it and push it",
		Long: `Builds an application artifact: one layer per --layer (ordered least to most
frequently changed), then the launch layer holding launch.json, with an image config that
mirrors it. Every layer is validated before anything is pushed. The same inputs always
give the same digest. The last line printed is REF@sha256:<digest>.`,
		Example: `  brewlet push registry.example/shop/api:1.4 \
    --layer dependency=./venv/lib:/app/lib --layer app=./src:/app/src \
    --entrypoint python --arg -m --arg api --env PYTHONPATH=/app/src:/app/lib \
    --requires-runtime python-3.12`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	f := c.Flags()
	f.StringArrayVar(&o.layers, "layer", nil, "ROLE=SRC:DEST with ROLE app or dependency and DEST under /app (repeatable, in order)")
	f.StringVar(&o.launchFile, "launch", "", "launch.json to use ('-' for stdin) instead of --entrypoint/--arg/--env/--workdir")
	f.StringVar(&o.entrypoint, "entrypoint", "", "program to run: a command on the runtime's PATH or an absolute path")
	f.StringArrayVar(&o.args, "arg", nil, "argument (repeatable)")
	f.StringArrayVar(&o.envs, "env", nil, "environment variable NAME=VALUE (repeatable; PATH is the runtime's)")
	f.StringVar(&o.workdir, "workdir", "", "working directory (default /app)")
	f.StringArrayVar(&o.requires, "requires-runtime", nil, "runtime ID the artifact was tested on (repeatable)")
	f.StringArrayVar(&o.platforms, "platform", nil, "os/arch to publish for (repeatable; several make an index; default linux/amd64)")
	f.BoolVar(&o.insecure, "insecure", false, "allow plain HTTP to a non-loopback registry")
	return c
}

func (o *pushOpts) launch() (*artifact.Launch, error) {
	if o.launchFile != "" {
		if o.entrypoint != "" || len(o.args)+len(o.envs)+len(o.requires) > 0 || o.workdir != "" {
			return nil, usageError{fmt.Errorf("--launch excludes --entrypoint, --arg, --env, --workdir and --requires-runtime")}
		}
		b, err := stdinOrFile(o.launchFile)
		if err != nil {
			return nil, err
		}
		return artifact.ParseLaunch(b)
	}
	if o.entrypoint == "" {
		return nil, usageError{fmt.Errorf("give --entrypoint or --launch")}
	}
	l := &artifact.Launch{SchemaVersion: artifact.LaunchSchemaVersion,
		Process: artifact.Process{Entrypoint: []string{o.entrypoint}, Args: o.args, WorkingDir: o.workdir}}
	for _, kv := range o.envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usageError{fmt.Errorf("--env %q: want NAME=VALUE", kv)}
		}
		l.Process.Env = append(l.Process.Env, artifact.EnvVar{Name: k, Value: v})
	}
	if len(o.requires) > 0 {
		l.Requires = &artifact.Requires{RuntimeImages: o.requires}
	}
	return l, l.Validate()
}

func (o *pushOpts) run(cmd *cobra.Command, refStr string) error {
	if len(o.layers) == 0 {
		return usageError{fmt.Errorf("give at least one --layer app=SRC:DEST")}
	}
	ref, err := registry.Reference(refStr, o.insecure)
	if err != nil {
		return err
	}
	l, err := o.launch()
	if err != nil {
		return err
	}
	var layers []ociimage.RoleLayer
	apps := 0
	for _, s := range o.layers {
		spec, err := artifact.ParseLayerSpec(s)
		if err != nil {
			return err
		}
		if spec.Role == "app" {
			apps++
		}
		b, err := spec.LayerTar()
		if err != nil {
			return fmt.Errorf("--layer %s: %w", s, err)
		}
		layers = append(layers, ociimage.RoleLayer{Role: spec.Role, Tar: b})
	}
	if apps == 0 {
		return usageError{fmt.Errorf("at least one --layer must have role app")}
	}
	platforms := o.platforms
	if len(platforms) == 0 {
		platforms = []string{"linux/amd64"}
	}
	var imgs []v1.Image
	var plats []v1.Platform
	for _, ps := range platforms {
		p, err := registry.ParsePlatform(ps)
		if err != nil {
			return usageError{err}
		}
		img, err := ociimage.BuildImage(layers, l, p)
		if err != nil {
			return err
		}
		imgs, plats = append(imgs, img), append(plats, p)
	}
	opts, err := registryOptions(cmd, o.insecure)
	if err != nil {
		return err
	}
	ch, wait := progress(cmd.ErrOrStderr(), "pushing")
	opts = append(opts, remote.WithProgress(ch))
	var digest v1.Hash
	if len(imgs) == 1 {
		err = remote.Write(ref, imgs[0], opts...)
		if err == nil {
			digest, err = imgs[0].Digest()
		}
	} else {
		idx := ociimage.BuildIndex(imgs, plats)
		err = remote.WriteIndex(ref, idx, opts...)
		if err == nil {
			digest, err = idx.Digest()
		}
	}
	wait()
	if err != nil {
		return registry.CLIHints.Classify(fmt.Errorf("push %s: %w", ref, err), ref.Context().RegistryStr(), "")
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s@%s\n", ref.Context().Name(), digest)
	return nil
}

// fetchImages returns the artifact's images: one, or every manifest of an index.
func fetchImages(cmd *cobra.Command, refStr string, insecure bool) ([]v1.Image, error) {
	ref, err := registry.Reference(refStr, insecure)
	if err != nil {
		return nil, err
	}
	opts, err := registryOptions(cmd, insecure)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, registry.CLIHints.Classify(fmt.Errorf("fetch %s: %w", ref, err), ref.Context().RegistryStr(), "")
	}
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		return []v1.Image{img}, err
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []v1.Image
	for _, m := range im.Manifests {
		img, err := idx.Image(m.Digest)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}

func newInspectCmd() *cobra.Command {
	var asJSON, insecure bool
	c := &cobra.Command{
		Use:   "inspect REF",
		Short: "Show an artifact's layers, launch configuration and runtime requirements",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			imgs, err := fetchImages(cmd, args[0], insecure)
			if err != nil {
				return err
			}
			var reps []*artifact.Report
			for _, img := range imgs {
				rep, err := artifact.Inspect(img)
				if err != nil {
					return err
				}
				reps = append(reps, rep)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(reps)
			}
			for _, r := range reps {
				printReport(cmd, r)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVar(&insecure, "insecure", false, "allow plain HTTP to a non-loopback registry")
	return c
}

func printReport(cmd *cobra.Command, r *artifact.Report) {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "manifest  %s (%s)\n", r.Digest, r.Platform)
	fmt.Fprintf(w, "%-11s %12s  %s\n", "ROLE", "SIZE", "DIGEST")
	for _, l := range r.Layers {
		fmt.Fprintf(w, "%-11s %12d  %s\n", l.Role, l.Size, l.Digest)
	}
	p := r.Launch.Process
	fmt.Fprintf(w, "entrypoint %q\nargs       %q\nworkingDir %s\n", p.Entrypoint, p.Args, p.WorkingDir)
	for _, e := range p.Env {
		fmt.Fprintf(w, "env        %s=%s\n", e.Name, e.Value)
	}
	if r.Launch.Requires != nil && len(r.Launch.Requires.RuntimeImages) > 0 {
		fmt.Fprintf(w, "requires   %s\n", strings.Join(r.Launch.Requires.RuntimeImages, ", "))
	} else {
		fmt.Fprintln(w, "requires   (any runtime image)")
	}
}

func newVerifyCmd() *cobra.Command {
	var insecure bool
	c := &cobra.Command{
		Use:   "verify REF",
		Short: "Apply every artifact rule to a pushed artifact; exits non-zero with the reason code on a violation",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			imgs, err := fetchImages(cmd, args[0], insecure)
			if err != nil {
				return err
			}
			for _, img := range imgs {
				rep, err := artifact.Verify(img)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "ok  %s (%s): %d layers, launch %q\n", rep.Digest, rep.Platform, len(rep.Layers), rep.Launch.Process.Entrypoint)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&insecure, "insecure", false, "allow plain HTTP to a non-loopback registry")
	return c
}
