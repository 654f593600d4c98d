//go:build race

package tablefile

// raceEnabled: the race detector changes what allocates, so allocation
// counts are checked only without it.
const raceEnabled = true
