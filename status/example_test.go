package status_test

import (
	"fmt"

	"github.com/cairn-sd/cairn/status"
)

// A writer rebuilds every slot and publishes; a reader holds the current
// table for one answer.
func Example() {
	pub, err := status.New(status.Config{Capacity: 4})
	if err != nil {
		panic(err)
	}
	slots := status.NewSlots(pub.Capacity())
	services := status.NewNames("shop/cart")
	localities := status.NewNames("eu-west", "eu-west-1a")
	for _, key := range []string{"shop/cart/c1", "shop/cart/c2"} {
		if _, err := slots.Assign(key); err != nil {
			panic(err)
		}
	}

	// The evaluator, every second: write every slot, used or not.
	_, err = pub.Build(func(b *status.Builder) error {
		b.SetStoreRevision(17)
		b.SetServices(services)
		b.SetLocalities(localities)
		entries := b.Entries()
		for slot := range entries {
			_, hash, ok := slots.Key(slot)
			if !ok {
				entries[slot] = status.Entry{}
				continue
			}
			e := status.Entry{Key: hash, Incarnation: 1, Service: 1, BaseWeight: 100,
				Region: 1, Zone: 2, Verdict: status.Healthy, Lifecycle: status.Ready}
			if slot == 1 {
				e.Verdict = status.Unhealthy
			}
			if e.Verdict != status.Unhealthy {
				e.Flags, e.Weight = status.Eligible, e.BaseWeight
			}
			entries[slot] = e
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	slots.Recycle()

	// A DNS query: every member of the service, whatever its verdict.
	t := pub.Acquire()
	defer t.Release()
	svc, _ := t.Services().ID("shop/cart")
	fmt.Println("version", t.Version(), "revision", t.StoreRevision())
	for _, slot := range t.Members(svc) {
		e := t.Entry(int(slot))
		fmt.Println(slot, e.Verdict, e.Flags, e.Weight, t.Locality(e.Zone))
	}
	// Output:
	// version 1 revision 17
	// 0 healthy eligible 100 eu-west-1a
	// 1 unhealthy 0 0 eu-west-1a
}
