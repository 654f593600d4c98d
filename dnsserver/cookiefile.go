package dnsserver

import (
	"fmt"
	"os"
)

// ReadCookieSecrets reads a cookie-secret file (ParseCookieSecrets): the
// current secret, and the previous one or nil. A file that cannot be read
// gives os.ReadFile's error (it names the file); a malformed one, an
// error naming the file, the line and the rule.
func ReadCookieSecrets(path string) (cur, prev []byte, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	cur, prev, err = ParseCookieSecrets(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return cur, prev, nil
}

// LoadCookieSecrets reads the cookie-secret file at path and rolls the
// server's secrets to it (SetCookieSecrets), as on a SIGHUP. It reports
// whether the file gave a previous secret. On error nothing changes.
func (s *Server) LoadCookieSecrets(path string) (previous bool, err error) {
	cur, prev, err := ReadCookieSecrets(path)
	if err != nil {
		return false, err
	}
	if err := s.SetCookieSecrets(cur, prev); err != nil {
		return false, err
	}
	return prev != nil, nil
}
