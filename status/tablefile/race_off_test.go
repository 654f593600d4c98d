//go:build !race

package tablefile

const raceEnabled = false
