package acl

// CheckProber judges, before a server starts, the token it will send its
// probe results to the leader with (node is the server's node id): the
// ProbeObserver refusal (wrapping ErrDenied) when this Authorizer knows
// the token as one the leader would refuse (a prober token of another
// node or of none, a token of another scope), and nil otherwise. A token
// it does not know (one stored in the cluster, or only in the leader's
// token file) is the leader's to judge; with ACLs off, or no token, there
// is nothing to judge.
func (a *Authorizer) CheckProber(secret, node string) error {
	if !a.Enabled() || secret == "" {
		return nil
	}
	id, err := a.Authenticate(secret)
	if err != nil {
		return nil
	}
	_, err = id.ProbeObserver(node)
	return err
}
