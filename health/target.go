package health

import (
	"strconv"
	"strings"

	"github.com/cairn-sd/cairn/wire"
)

// TargetID is the probe target id of one incarnation of an instance.
func TargetID(key wire.InstanceKey, inc uint64) string {
	return key.String() + "#" + strconv.FormatUint(inc, 10)
}

// parseTarget splits a target id into the instance key string and the
// incarnation. Only the canonical form TargetID prints is accepted: the
// observer check hashes the id as sent, so "#007" must not pass for "#7".
func parseTarget(id string) (key string, inc uint64, ok bool) {
	i := strings.LastIndexByte(id, '#')
	if i <= 0 || i+1 < len(id) && id[i+1] == '0' {
		return "", 0, false
	}
	inc, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil || inc == 0 || strings.Count(id[:i], "/") != 2 {
		return "", 0, false
	}
	return id[:i], inc, true
}
