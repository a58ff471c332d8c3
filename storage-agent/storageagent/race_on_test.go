//go:build race

package storageagent

// raceEnabled: this test binary runs with the race detector.
const raceEnabled = true
