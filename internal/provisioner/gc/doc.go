// Package gc removes runtime generations and cached layers that are provably unused (no
// lease, no mount, not current) and have stayed so for a grace period. Any doubt keeps what
// it concerns. A sweep holds the layer-cache lock exclusive (see package install) and checks
// before every removal that the agent is still the node's writer.
package gc
