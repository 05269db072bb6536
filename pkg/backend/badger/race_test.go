//go:build race

package badger_test

// raceEnabled skips tests that move so many bytes that the race detector
// makes them slow; they run in plain `go test`.
const raceEnabled = true
