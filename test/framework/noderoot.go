package framework

import "brewlet.sh/brewlet/test/framework/hostops"

// NodeRootEnv chooses the root mount propagation the e2e binaries run under (see
// hostops.NodeRoot).
const NodeRootEnv = hostops.NodeRootEnv

// NodeRoot is the root mount propagation this process runs under: "shared" or "private".
func NodeRoot() string { return hostops.NodeRoot() }
