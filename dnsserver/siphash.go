package dnsserver

import (
	"encoding/binary"
	"math/bits"
)

// sipKey is a SipHash key: its 16 octets read as two little-endian
// words, as the algorithm takes them.
type sipKey struct{ k0, k1 uint64 }

func newSipKey(b [16]byte) sipKey {
	return sipKey{binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])}
}

// sum24 is SipHash-2-4 of m under k (Aumasson and Bernstein, "SipHash: a
// fast short-input PRF", 2012): two compression rounds per 8-octet word,
// four finalisation rounds, a 64-bit result. It allocates nothing: m is
// only read. RFC 9018 server cookies use it; the standard library has
// none to offer (its hash/maphash is not keyed with a secret of ours, and
// not stable across processes).
func (k sipKey) sum24(m []byte) uint64 {
	v0 := k.k0 ^ 0x736f6d6570736575 // "somepseu"
	v1 := k.k1 ^ 0x646f72616e646f6d // "dorandom"
	v2 := k.k0 ^ 0x6c7967656e657261 // "lygenera"
	v3 := k.k1 ^ 0x7465646279746573 // "tedbytes"
	n := len(m)
	for ; len(m) >= 8; m = m[8:] {
		w := binary.LittleEndian.Uint64(m)
		v3 ^= w
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= w
	}
	// The last word: the remaining octets, little-endian, and the
	// message's length (mod 256) in the top octet.
	w := uint64(n) << 56
	for i := len(m) - 1; i >= 0; i-- {
		w |= uint64(m[i]) << (8 * i)
	}
	v3 ^= w
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= w
	v2 ^= 0xff
	for range 4 {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	return v0 ^ v1 ^ v2 ^ v3
}

// sipRound is one SipRound: add, rotate, xor on the four state words.
func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13) ^ v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16) ^ v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21) ^ v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17) ^ v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
