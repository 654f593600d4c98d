package wire

// Member is one server of the cluster as the store records it.
type Member struct {
	NodeID   string `json:"node_id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// Region and Zone are where the server runs (its --region and
	// --zone): a target's two probers are chosen in different zones.
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
	// Leader and Voter come from the raft configuration when listed.
	Leader bool `json:"leader"`
	Voter  bool `json:"voter"`
}
