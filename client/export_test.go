package client

import (
	"time"

	"github.com/cairn-sd/cairn/internal/backoff"
)

// StretchBackoff makes every backoff wait of c's retries uniform in
// [0, d), so that a test can tell a wait cut short by ctx from one that
// ran out. Call it before c is used.
func StretchBackoff(c *Client, d time.Duration) {
	c.retryWait = backoff.Config{Min: d, Max: d}
}
