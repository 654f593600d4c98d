package status

import (
	"strings"
	"testing"
	"unsafe"
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

	name := cart.name
	d2 := &Directory{Services: d.Services, Instances: []*InstanceInfo{nil, nil, nil, cart}}
	steps := 0
	d2.Index(func(slot int) uint32 { return 1 }, func() { steps++ })
	if slot, ok := d2.SlotOf("web-1.cart.shop"); !ok || slot != 3 {
		t.Errorf("second directory: SlotOf = %d, %v; want 3, true", slot, ok)
	}
	if steps != 4 {
		t.Errorf("step called %d times, want once per slot (4)", steps)
	}
	if unsafe.StringData(cart.name) != unsafe.StringData(name) {
		t.Error("re-indexing an InstanceInfo made its name again")
	}

	// Under another service's names (the same length, another case), the
	// name is made again.
	for _, svc := range []ServiceInfo{{Namespace: "Shop", Name: "Cars"}, {Namespace: "SHOP", Name: "CART"}, {Namespace: "Shop", Name: "Cärt"}} {
		d3 := &Directory{Services: []ServiceInfo{{}, svc}, Instances: []*InstanceInfo{cart}}
		d3.Index(func(slot int) uint32 { return 1 }, nil)
		want := strings.ToLower("web-1." + svc.Name + "." + svc.Namespace)
		if slot, ok := d3.SlotOf(want); !ok || slot != 0 || cart.name != want {
			t.Errorf("in %s.%s: SlotOf(%s) = %d, %v, name %q; want 0, true, %q", svc.Name, svc.Namespace, want, slot, ok, cart.name, want)
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
