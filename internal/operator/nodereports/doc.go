// Package nodereports is what the operator's controllers share about the nodes' reports:
// the clock the agents' heartbeats are timed on (the operator's own, not the nodes'), the
// index of NodeRuntimes by the runtime IDs they report and the requests it maps them to,
// and the one-line summary of nodes with problems a status message carries. The
// controllers (runtimeimage, nodeprofile, restarts) import it and never each other.
package nodereports
