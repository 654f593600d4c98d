// Package peer follows other regions' views, read-only.
//
// A region is its own authority (its own raft cluster, its own
// instances); nothing of another region is ever written to its store.
// What crosses a region's edge is what any client of the region may
// read: its views, over its own delta xDS. For each region named with
// --peer-region, Peers runs an agent (package agent) that subscribes to
// that region's servers for the services this node's table holds, keeps
// what they said with its revisions (never an older one after a newer),
// and keeps it on disk beside the node's data, so that a node restarted
// while the other region is cut off still has its last view.
//
// The node's publisher (package publish) lays the instances out in its
// own table beside the store's, as they came: incarnation, verdict,
// lifecycle, flags, weights and shift are the other region's, and its
// callers rank them as tier 2, another region, by the tier rules every
// reader applies. Only the instances a region says are in it are taken
// from its views (a region speaks for itself, not for a third region or
// for this one). When a region's view is older than stale-after (its
// link cut, its servers gone), its instances are kept as they were and
// marked status.PeerStale: an answer that includes one is a stale answer
// (EDE 3), as an answer from a stale table is. Nothing is dropped for
// being old.
//
// Imports: the agent (the client of another region's xDS), the table's
// vocabulary; never the store or the health loop.
package peer
