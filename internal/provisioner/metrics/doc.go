// Package metrics exposes the node's Prometheus metrics. Counters are updated as installs
// happen; everything read from disk is computed at scrape time, so nothing is stale.
package metrics
