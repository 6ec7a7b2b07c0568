//go:build race

package redact

// Under the race detector the soup tests run an eighth of their rounds.
// They check pure functions in one goroutine, where the detector has
// nothing to find, and it slows the rules' regular expressions about
// twentyfold: the full rounds took three minutes of a loaded 2-core
// machine. `make test` runs this package a second time without the
// detector, with every round (see the Makefile's test target).
func init() { soupRounds /= 8 }
