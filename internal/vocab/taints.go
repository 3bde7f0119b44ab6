package vocab

// TaintRuntimeNotReady is the default startup taint of a node joining a Brewlet pool
// (docs/install.md, "Autoscalers"): the node registers with it (Karpenter startupTaints, a
// kubelet's --register-with-taints), Brewlet pods do not tolerate it, and only the node's
// own agent removes it, once the node can start Brewlet containers. An autoscaler's
// simulation ignores it, so a pending Brewlet pod still scales a pool up.
const TaintRuntimeNotReady = Domain + "/runtime-not-ready"
