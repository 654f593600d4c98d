package status

import (
	"errors"
	"time"
)

// Config configures a Publisher. A zero field means "use the default".
type Config struct {
	// Capacity is the number of slots of every table: the most instances
	// this node can hold a status for. Every table is this long whether
	// one slot is used or all of them, so that a rebuild costs the same
	// whatever changed (SPEC §0.6). A table takes 32 bytes a slot, plus 4
	// for the service index: 3.6 MB at the default. Defaults to 100,000.
	Capacity int
	// Initial is the number of slots of the first tables, for a node
	// whose tables grow with what it holds (the agent): its Writer
	// doubles them, up to Capacity, when it lays out more instances
	// than they have slots, and never shrinks them. The work of a
	// build stays constant for a given size: the size follows the most
	// instances held, not how many change. Defaults to Capacity: tables
	// of one size from the start (the server's, whose per-slot arrays
	// outside this package are sized once).
	Initial int
	// Tables is the number of tables allocated by New: the current one,
	// the previous one (still read by the readers that acquired it just
	// before the swap), and one to build into. Build allocates another,
	// and counts it, only when readers still hold every spare. Defaults
	// to 3.
	Tables int
	// Now stamps Table.Built. Defaults to time.Now.
	Now func() time.Time
}

// Defaults for Config (see the fields), and the largest capacity.
const (
	DefaultCapacity = 100_000
	DefaultTables   = 3
	// MaxCapacity bounds Capacity at 2^24 slots (512 MiB a table): far
	// beyond one region, so a larger value is a mistake, and small enough
	// for slot numbers to fit the index's 32 bits.
	MaxCapacity = 1 << 24
)

func (c *Config) setDefaults() {
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.Initial == 0 {
		c.Initial = c.Capacity
	}
	if c.Tables == 0 {
		c.Tables = DefaultTables
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports the first inconsistent field.
func (c *Config) Validate() error {
	switch {
	case c.Capacity < 0:
		return errors.New("status: Capacity must not be negative")
	case c.Capacity > MaxCapacity:
		return errors.New("status: Capacity must be at most MaxCapacity (16777216)")
	case c.Initial < 0 || c.Initial > c.Capacity:
		return errors.New("status: Initial must be between 0 and Capacity")
	case c.Tables < 0:
		return errors.New("status: Tables must not be negative")
	case c.Tables == 1:
		return errors.New("status: Tables must be at least 2 (one current, one to build into)")
	}
	return nil
}
