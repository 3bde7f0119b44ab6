// Package containerd registers the brewlet runtime handler and shim with a node's containerd
// and takes them away again on cleanup: a drop-in file or a TOML rewrite of the main config,
// each candidate checked with containerd's own parser, a restart only when the effective
// config changed, a health check through CRI, and rollback on any failure. HostExec runs
// host binaries in the node's root when the agent runs in a pod.
package containerd
