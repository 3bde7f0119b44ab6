// Package provisioner is the node agent's composition root: Main reads the options, builds
// the pieces below and hands them to the agent loop. It holds no logic of its own; each
// job lives in one subpackage, and the arrows only point down:
//
//	agent        the per-node loop: decide, authorize, install, publish, clean up
//	├── clusterview  what the API server holds (quorum-confirmed informers) and the writes back
//	├── install      registry fetch, verification, extraction and validation of one generation
//	├── gc           removal of generations and layers proven unused
//	├── tasks        which Brewlet containers containerd still runs (for status and cleanup)
//	├── containerd   registering the brewlet handler and shim with the node's containerd
//	├── writer       the per-node Lease that makes one agent process the node's only writer
//	└── metrics      the node's Prometheus metrics
//
// docs/design.md draws the same map with who owns which piece of node state.
package provisioner
