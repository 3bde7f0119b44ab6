// Command images builds Brewlet's component images (operator, provisioner) for several
// platforms without a container engine and pushes them: `make images REGISTRY=host:port`.
// It prints one "name repo@sha256:..." line per image for the chart to pin.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"brewlet.sh/brewlet/internal/images"
	"brewlet.sh/brewlet/internal/registry"
)

func main() {
	reg := flag.String("registry", "", "registry host[:port] and optional path prefix, e.g. 127.0.0.1:5000/brewlet")
	tag := flag.String("tag", "dev", "tag pushed next to the digest")
	plats := flag.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch[/variant]")
	insecure := flag.Bool("insecure", false, "plain HTTP to a non-loopback registry")
	only := flag.String("only", "", "comma-separated component names (default: all)")
	var caFiles []string
	flag.Func("ca-file", "a PEM file of authorities trusted for the registry besides the system's (repeatable)", func(v string) error {
		caFiles = append(caFiles, v)
		return nil
	})
	flag.Parse()
	if *reg == "" {
		fmt.Fprintln(os.Stderr, "usage: images --registry HOST[:PORT][/PREFIX] [--tag T] [--platforms P,...] [--ca-file PEM]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *reg, *tag, *plats, *only, *insecure, caFiles); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, reg, tag, plats, only string, insecure bool, caFiles []string) error {
	// The registry's trust: credentials come from the Docker config, as for the CLI.
	client, err := registry.ClientOptions(ctx, insecure, caFiles)
	if err != nil {
		return err
	}
	var platforms []v1.Platform
	for _, s := range strings.Split(plats, ",") {
		p, err := registry.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		platforms = append(platforms, p)
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	b := images.Builder{ModuleDir: wd, Version: tag, Progress: func(s string) { fmt.Fprintln(os.Stderr, "  "+s) }}
	for i, c := range images.Components {
		if only != "" && !strings.Contains(","+only+",", ","+c.Name+",") {
			continue
		}
		fmt.Fprintf(os.Stderr, "[%d/%d] %s\n", i+1, len(images.Components), c.Name)
		idx, err := b.Build(ctx, c, platforms)
		if err != nil {
			return err
		}
		ref, err := images.Push(ctx, idx, strings.TrimSuffix(reg, "/")+"/"+c.Name, tag, insecure, client...)
		if err != nil {
			return err
		}
		fmt.Println(c.Name, ref)
	}
	return nil
}
