// Command brewlet builds, pushes, inspects and verifies Brewlet application artifacts and
// runtime images.
package main

import (
	"os"

	"brewlet.sh/brewlet/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
