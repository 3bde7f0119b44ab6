// Package tasks answers which containers containerd still runs on Brewlet generations: the
// agent reports them in NodeRuntime status (taskObservations), and cleanup waits for them.
// Source is containerd's task API in production; Events shortens the wait after a task
// exits. A task containerd lists but cannot describe keeps its lease and marks the report
// incomplete (fail closed).
package tasks
