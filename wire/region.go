package wire

import "time"

// PeerRegion is another region as a server follows it (GET /v1/regions):
// its views of the services this server's table holds, read over the
// region's own delta xDS.
type PeerRegion struct {
	Region string `json:"region"`
	// Servers are the region's servers as --peer-region names them;
	// Server the one whose stream is open now, or was last.
	Servers   []string `json:"servers"`
	Server    string   `json:"server"`
	Connected bool     `json:"connected"`
	// Stale: the view is older than stale-after (or restored from disk
	// and not refreshed since); its instances are served, marked stale.
	// AgeSeconds is how long since it was last known current.
	Stale      bool    `json:"stale"`
	AgeSeconds float64 `json:"age_seconds"`
	Restored   bool    `json:"restored"`
	// Services and Instances count what this server holds of the region;
	// Revision is the highest store revision of the region's views held
	// (the region's own revision, never this one's).
	Services  int    `json:"services"`
	Instances int    `json:"instances"`
	Revision  uint64 `json:"revision"`
	LoadError string `json:"load_error,omitempty"`
}

// Regions is GET /v1/regions: this server's region and the other regions
// it follows.
type Regions struct {
	Region string       `json:"region"`
	Peers  []PeerRegion `json:"peers"`
	// Signal is the out-of-band failover signal, when the server reads
	// one.
	Signal *FailoverSignal `json:"signal,omitempty"`
}

// FailoverSignal is the out-of-band failover signal as a server last
// read it (--failover-signal): the failovers of its region it holds, in
// force or returning.
type FailoverSignal struct {
	Source string `json:"source"`
	// ReadAt is when it was last read whole; Error what was wrong with
	// the last read, if anything (the last one read stays in force).
	ReadAt    time.Time        `json:"read_at,omitzero"`
	Error     string           `json:"error,omitempty"`
	Failovers []EvacuationView `json:"failovers"`
	// Ignored are its entries for other regions.
	Ignored []string `json:"ignored,omitempty"`
}
