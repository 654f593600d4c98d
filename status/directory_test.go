package status

import (
	"strconv"
	"strings"
	"testing"
)

// TestDirectoryIndex: the writer's index finds services, namespaces and
// instances by lower-case name, ignores free slots and slots whose
// service is unknown, and a later Directory reusing an InstanceInfo
// finds it under the same name without making it again.
func TestDirectoryIndex(t *testing.T) {
	cart := &InstanceInfo{ID: "Web-1", Incarnation: 3}
	d := &Directory{Services: []ServiceInfo{{}, {Namespace: "Shop", Name: "Cart"}},
		Instances: []*InstanceInfo{nil, cart, {ID: "orphan"}}}
	svcOf := map[int]uint32{1: 1, 2: 9}
	d.Index(func(slot int) uint32 { return svcOf[slot] }, nil)

	if id, ok := d.ServiceID("cart.shop"); !ok || id != 1 {
		t.Errorf("ServiceID(cart.shop) = %d, %v; want 1, true", id, ok)
	}
	if _, ok := d.ServiceID("Cart.Shop"); ok {
		t.Error("ServiceID found a name that is not lower case: callers lower it")
	}
	if !d.HasNamespace("shop") || d.HasNamespace("pay") {
		t.Error("HasNamespace: want shop only")
	}
	if slot, ok := d.SlotOf("web-1.cart.shop"); !ok || slot != 1 {
		t.Errorf("SlotOf(web-1.cart.shop) = %d, %v; want 1, true", slot, ok)
	}
	if _, ok := d.SlotOf("orphan.cart.shop"); ok {
		t.Error("an instance whose service is unknown was indexed")
	}

	d2 := &Directory{Services: d.Services, Instances: []*InstanceInfo{nil, nil, nil, cart}}
	steps := 0
	d2.Index(func(slot int) uint32 { return 1 }, func() { steps++ })
	if slot, ok := d2.SlotOf("web-1.cart.shop"); !ok || slot != 3 {
		t.Errorf("second directory: SlotOf = %d, %v; want 3, true", slot, ok)
	}
	if steps != 4 {
		t.Errorf("step called %d times, want once per slot (4)", steps)
	}

	// The same InstanceInfo under another service's names (the same
	// length, another case) is found by those names only.
	for _, svc := range []ServiceInfo{{Namespace: "Shop", Name: "Cars"}, {Namespace: "SHOP", Name: "CART"}} {
		d3 := &Directory{Services: []ServiceInfo{{}, svc}, Instances: []*InstanceInfo{cart}}
		d3.Index(func(slot int) uint32 { return 1 }, nil)
		want := strings.ToLower("web-1." + svc.Name + "." + svc.Namespace)
		if slot, ok := d3.SlotOf(want); !ok || slot != 0 {
			t.Errorf("in %s.%s: SlotOf(%s) = %d, %v; want 0, true", svc.Name, svc.Namespace, want, slot, ok)
		}
		if want != "web-1.cart.shop" {
			if _, ok := d3.SlotOf("web-1.cart.shop"); ok {
				t.Errorf("in %s.%s: found under web-1.cart.shop", svc.Name, svc.Namespace)
			}
		}
	}

	var none *Directory
	if _, ok := none.ServiceID("cart.shop"); ok || none.HasNamespace("shop") {
		t.Error("a nil Directory found a name")
	}
	if _, ok := (&Directory{}).SlotOf("web-1.cart.shop"); ok {
		t.Error("an unindexed Directory found a name")
	}
}

// TestSlotOfKey: an instance is found by its store key as by its name,
// without an allocation; what is not a key of three parts is not.
func TestSlotOfKey(t *testing.T) {
	d := &Directory{Services: []ServiceInfo{{}, {Namespace: "shop", Name: "cart"}},
		Instances: []*InstanceInfo{nil, {ID: "web-1", Incarnation: 3}}}
	d.Index(func(slot int) uint32 { return 1 }, nil)
	if slot, ok := d.SlotOfKey("shop/cart/web-1"); !ok || slot != 1 {
		t.Errorf("SlotOfKey(shop/cart/web-1) = %d, %v; want 1, true", slot, ok)
	}
	long := strings.Repeat("a", 64)
	for _, key := range []string{"", "shop/cart", "shop/cart/web-2", "cart/shop/web-1", "shop/cart/web-1/x",
		"web-1.cart.shop", long + "/" + long + "/" + long} {
		if slot, ok := d.SlotOfKey(key); ok {
			t.Errorf("SlotOfKey(%q) = %d, true; want none", key, slot)
		}
	}
	if n := testing.AllocsPerRun(100, func() { d.SlotOfKey("shop/cart/web-1") }); n != 0 {
		t.Errorf("SlotOfKey allocates %v times, want 0", n)
	}
	var none *Directory
	if _, ok := none.SlotOfKey("shop/cart/web-1"); ok {
		t.Error("a nil Directory found a key")
	}
}

// TestDirectoryIndexFull: every instance of a directory of thousands, in
// services whose names share prefixes and lengths, is found at its own
// slot, however the hash places them; names that differ by one character
// from one that is there, or name no instance, are not found; and a
// lookup does not allocate.
func TestDirectoryIndexFull(t *testing.T) {
	const services, per = 50, 100
	d := &Directory{Services: make([]ServiceInfo, services+1), Instances: make([]*InstanceInfo, 0, services*per+services)}
	svcOf := []uint32{}
	for s := 1; s <= services; s++ {
		d.Services[s] = ServiceInfo{Namespace: "ns" + strconv.Itoa(s%3), Name: "svc-" + strconv.Itoa(s)}
		for i := 0; i < per; i++ {
			if i%7 == 0 {
				d.Instances, svcOf = append(d.Instances, nil), append(svcOf, 0) // free slots between
			}
			d.Instances, svcOf = append(d.Instances, &InstanceInfo{ID: "I-" + strconv.Itoa(i)}), append(svcOf, uint32(s))
		}
	}
	d.Index(func(slot int) uint32 { return svcOf[slot] }, nil)
	for slot, in := range d.Instances {
		if in == nil {
			continue
		}
		s := d.Services[svcOf[slot]]
		name := strings.ToLower(in.ID + "." + s.Name + "." + s.Namespace)
		if got, ok := d.SlotOf(name); !ok || int(got) != slot {
			t.Fatalf("SlotOf(%s) = %d, %v; want %d, true", name, got, ok, slot)
		}
		for _, miss := range []string{name + "x", "x" + name, strings.Replace(name, "i-", "j-", 1), strings.ToUpper(name)} {
			if got, ok := d.SlotOf(miss); ok {
				t.Fatalf("SlotOf(%s) = %d, true; want none", miss, got)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { d.SlotOf("i-5.svc-7.ns1") }); n != 0 {
		t.Errorf("SlotOf allocates %v times, want 0", n)
	}
}
