package agentview

import (
	"strconv"
	"time"
)

// StaleAgeKey is the gRPC metadata key by which an xDS server says how
// old its view of the store is, in whole milliseconds: in the trailer of
// a stream it ends or refuses because it is stale (past --stale-after
// without quorum, SPEC §4), and in the header of a stream it serves
// stale (to a client that held nothing). A client takes what it holds as
// current as of that long before it read the value.
const StaleAgeKey = "cairn-stale-age-ms"

// FormatStaleAge is age as StaleAgeKey carries it.
func FormatStaleAge(age time.Duration) string { return strconv.FormatInt(age.Milliseconds(), 10) }

// ParseStaleAge reads StaleAgeKey's values (metadata.MD.Get): false when
// there is none, or it is not a count of milliseconds.
func ParseStaleAge(vals []string) (time.Duration, bool) {
	if len(vals) != 1 {
		return 0, false
	}
	ms, err := strconv.ParseInt(vals[0], 10, 64)
	if err != nil || ms < 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}
