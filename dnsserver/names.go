package dnsserver

import "unsafe"

// key writes the lower-cased labels joined by dots into buf and returns
// them as a string that shares buf's memory, for a lookup in the
// directory's name index (status.Directory.Index), which keeps no key it
// is asked for: valid only until buf is written again.
func key(buf []byte, labels ...string) string {
	b := buf[:0]
	for i, l := range labels {
		if i > 0 {
			b = append(b, '.')
		}
		for j := 0; j < len(l); j++ {
			c := l[j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
		}
	}
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
