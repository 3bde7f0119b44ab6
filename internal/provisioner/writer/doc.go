// Package writer holds the per-node Lease that makes exactly one agent process the node's
// writer. During a rolling update the old and new agent pods overlap on a node; only the
// Lease holder may change host state, and Run never lets two leaders of one node overlap,
// even within one process. Lease renewals double as the agent's heartbeat.
package writer
