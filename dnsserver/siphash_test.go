package dnsserver

import (
	"encoding/binary"
	"testing"
)

// The test vectors of the SipHash paper (Appendix A) and of its
// reference implementation's vectors.h: key 00 01 … 0f, message 00 01 …
// of the given length. Lengths 0 to 4 and 15 exercise every tail, 8 one
// whole word and an empty tail.
func TestSipHash24Vectors(t *testing.T) {
	var kb [16]byte
	for i := range kb {
		kb[i] = byte(i)
	}
	k := newSipKey(kb)
	msg := make([]byte, 64)
	for i := range msg {
		msg[i] = byte(i)
	}
	for _, c := range []struct {
		n    int
		want uint64
	}{
		{0, 0x726fdb47dd0e0e31},
		{1, 0x74f839c593dc67fd},
		{2, 0x0d6c8009d9a94f5a},
		{3, 0x85676696d7fb7e2d},
		{4, 0xcf2794e0277187b7},
		{8, 0x93f5f5799a932462},
		{15, 0xa129ca6149be45e5}, // the paper's worked example
	} {
		if got := k.sum24(msg[:c.n]); got != c.want {
			t.Errorf("SipHash-2-4 of %d octets: %#016x, want %#016x", c.n, got, c.want)
		}
	}
	// The key is read little-endian: the paper's k0 and k1.
	if k.k0 != 0x0706050403020100 || k.k1 != 0x0f0e0d0c0b0a0908 {
		t.Errorf("key words %#x %#x", k.k0, k.k1)
	}
	if n := testing.AllocsPerRun(100, func() { k.sum24(msg[:32]) }); n != 0 {
		t.Errorf("%v allocations per hash", n)
	}
}

// The length is in the last word: messages that differ only by trailing
// zero octets hash differently.
func TestSipHash24Length(t *testing.T) {
	k := sipKey{1, 2}
	seen := map[uint64]int{}
	buf := make([]byte, 40)
	for n := range buf {
		h := k.sum24(buf[:n])
		if m, dup := seen[h]; dup {
			t.Fatalf("%d and %d zero octets hash alike", m, n)
		}
		seen[h] = n
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1)
	if k.sum24(b[:]) == k.sum24(b[:7]) {
		t.Fatal("8 and 7 octets hash alike")
	}
}
