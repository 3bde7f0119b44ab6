// Package bench measures Brewlet against the stock paths in the same run: shim memory and
// CRI create+start against runc, runtime installs against ctr pull, the payoff of N
// applications as conventional images against Brewlet, the agents' API load and a fleet
// rotation on kwok. Its files build only with -tags bench (make bench); make test does not
// run them.
package bench
