package quorum

import "time"

// Update, Observe and Unobserve start the proposer's operations on lease
// values and observed keys (see Proposer); results and states come through
// Ready.
func (n *Node) Update(key string, epoch uint64, data string, deadline time.Duration) (OpID, error) {
	return n.prop.Update(key, epoch, data, deadline)
}
func (n *Node) Observe(key string, refresh time.Duration) (uint64, error) {
	return n.prop.Observe(key, refresh)
}
func (n *Node) Unobserve(key string) { n.prop.Unobserve(key) }

// Observed reports how many keys other nodes observe at this voter, and
// how many registrations that makes (zero when it is no voter).
func (n *Node) Observed() (keys, registrations int) { return n.obs.Observed() }

// observersReady adds the voter's pushes to observers to rd; those to this
// node go to its proposer.
func (n *Node) observersReady(rd *Ready) {
	if n.acc == nil {
		n.obs.out = nil
		return
	}
	ns := n.obs.ready(n.acc.Membership(), n.id)
	for i := range ns {
		if nt := &ns[i]; nt.To == n.id {
			n.prop.HandleNotify(nt)
		} else {
			rd.Messages = append(rd.Messages, Message{Kind: MsgNotify, From: n.id, To: nt.To, Notify: nt})
		}
	}
}

// refuseDataLoss keeps a node whose protocol cannot carry values
// (Request.NoData) from writing a grant back without the value this voter
// holds for it, as its read's write-back or its voter change's move would:
// each such accept is refused (ReasonInvalid) rather than obeyed. Its own
// grants, which carry no value, and every other write pass.
func (n *Node) refuseDataLoss(req *Request) {
	if !req.NoData || n.acc == nil {
		return
	}
	for i := range req.Ops {
		if op := &req.Ops[i]; op.Kind == OpAccept && op.Value.Data == "" && n.acc.holdsData(op.Key, op.Value) {
			op.Kind = 0 // not an operation: refused as invalid
		}
	}
}
