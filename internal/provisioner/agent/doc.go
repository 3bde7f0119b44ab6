// Package agent is the node agent's loop. One pass (Reconcile) always runs in the same
// order, and the order is the safety argument:
//
//  1. check that this process still holds the node's writer lease (writer.Lease);
//  2. read the Node, the directives (NodeProfiles, RuntimeImages) and the NodeRuntime with
//     quorum reads, stamping the time before the first read;
//  3. decide the targets (decide.go, pure) and, per runtime ID, revoke first, then renew
//     authorizations counted from that stamp, then queue installs (each in its own worker,
//     so a pass never waits for a registry);
//  4. open the startup fence only after every revocation is on disk;
//  5. publish labels and NodeRuntime status, sweep garbage, and clean the host up when no
//     profile selects the node any more.
//
// Every write to host state is preceded by a writer check, so an agent that lost its lease
// mid-pass stops before its next write. What the node holds is read from disk each pass,
// never remembered from an earlier process.
package agent
