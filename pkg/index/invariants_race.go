//go:build race || invariants

package index

// invariants enables the key index self-checks: on under the race detector
// or the invariants build tag, off in release builds.
const invariants = true
