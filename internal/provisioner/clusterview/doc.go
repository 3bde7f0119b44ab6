// Package clusterview is the agent's only door to the API server: View keeps informers of
// NodeProfiles and RuntimeImages and confirms them with a metadata-only quorum read before a
// pass trusts them; Cluster reads the node's own objects and writes its labels and
// NodeRuntime status (only when they change). Wake turns relevant watch events into an
// early pass. Nothing here touches the node's disk.
package clusterview
