//go:build !race

package badger_test

const raceEnabled = false
