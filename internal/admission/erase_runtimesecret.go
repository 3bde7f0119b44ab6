//go:build goexperiment.runtimesecret

package admission

import "runtime/secret"

// eraseAfter runs f under runtime/secret: the registers and stack f used are wiped when
// it returns, and its heap allocations (the one-shot CA key and crypto/ecdsa's copies of
// it) as soon as the garbage collector finds them unreachable.
func eraseAfter(f func()) { secret.Do(f) }
