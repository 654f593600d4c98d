package status

// Names is an immutable interned list of names: service keys for
// Entry.Service, locality names for Entry.Region and Entry.Zone. Id 0 is
// always the empty name.
//
// A Names is shared, never copied: the writer makes one when the set of
// names changes (rarely: a service defined, a new zone) and hands it to
// every Build after that, so a rebuild allocates nothing. It is safe for
// concurrent use. A nil *Names holds only the empty name.
type Names struct {
	names []string
	ids   map[string]uint32
}

// NewNames interns names in order: the first gets id 1, the next id 2,
// and so on. An empty name, or a name already given, takes no new id.
// The writer must keep ids stable across the tables it builds while an
// entry refers to them, so it extends a list by calling NewNames with the
// old names first.
func NewNames(names ...string) *Names {
	n := &Names{names: make([]string, 1, len(names)+1), ids: make(map[string]uint32, len(names)+1)}
	n.ids[""] = 0
	for _, s := range names {
		if _, ok := n.ids[s]; ok {
			continue
		}
		n.ids[s] = uint32(len(n.names))
		n.names = append(n.names, s)
	}
	return n
}

// Len returns the number of ids, the empty name's included: ids run from
// 0 to Len()-1.
func (n *Names) Len() int {
	if n == nil {
		return 1
	}
	return len(n.names)
}

// Name returns the name with the given id, or "" for an id out of range.
func (n *Names) Name(id uint32) string {
	if n == nil || uint64(id) >= uint64(len(n.names)) {
		return ""
	}
	return n.names[id]
}

// ID returns the id of name.
func (n *Names) ID(name string) (uint32, bool) {
	if n == nil {
		return 0, name == ""
	}
	id, ok := n.ids[name]
	return id, ok
}
