//go:build race

package e2e

// raceEnabled: the race detector slows everything several times, so
// latency targets are checked as measured without it and only bounded
// loosely with it (the figures are printed either way).
const raceEnabled = true
