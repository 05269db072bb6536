//go:build !race && !invariants

package index

const invariants = false
