// Package install installs one runtime generation into a node's layer cache: resolve the
// approved digest (mirrors first, the origin always tried), verify every blob against its
// digest, extract layers with bounded size, count and path rules, validate the result, and
// publish it with a rename so a half-written generation is never visible.
//
// Concurrency: every install holds the layer-cache lock (hoststate.Layout.LayerCacheLock)
// shared from its first look at the cache until its generation is published; the garbage
// collector takes it exclusive, so a layer an install is about to reuse is never removed
// underneath it. Each install works in its own flocked workspace, which the collector skips.
package install
