//go:build !goexperiment.runtimesecret

package admission

// eraseAfter runs f. Without GOEXPERIMENT=runtimesecret Go offers no way to wipe the
// memory a private key passed through (crypto/ecdsa keeps its own copies while signing):
// the one-shot CA key is only dropped, left to the garbage collector.
func eraseAfter(f func()) { f() }
