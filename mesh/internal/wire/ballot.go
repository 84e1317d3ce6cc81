package wire

import (
	"fmt"
	"slices"

	"github.com/lockmesh/lockmesh/quorum"
)

// The ballot messages: requests, responses and notifications, encoded by
// hand (msgpack.go). The field counts below are what this version writes;
// a decoder requires at least the ones every version wrote and skips any
// beyond those it knows.

const (
	flagWatch   = 1
	flagIfFree  = 2
	flagMigrate = 4
)

// Fields of each struct: written by this version; the fewest a decoder
// takes (fields after them being optional).
const (
	ballotFields     = 3
	valueFields      = 6 // 7 with a voter configuration (the configuration register's value), 8 with Data
	membershipFields = 6
	joinedFields     = 2
	opFields         = 8 // 9 with Observe
	requestFields    = 4
	resultFields     = 9 // the ninth is flags (resultCopy); version 1 decoders read an integer there and ignore it
	responseFields   = 5 // 6 with the acceptor's configuration, 7 with Lives
	notifyFields     = 5 // 6 with Changes
	changeFields     = 4 // 5 with Copy
)

// Flags of a result (its ninth field).
const resultCopy = 1 // Result.Copy

func (e *encoder) ballot(b quorum.Ballot) {
	e.fields(ballotFields)
	e.uint(b.Counter)
	e.uint(b.Incarnation)
	e.str(string(b.Node))
	e.end()
}

// value encodes v; the configuration register's value has a seventh field,
// and a held value with Data (version 3) an eighth, the seventh then nil
// when absent. An encoder for a node of an earlier version (noData) leaves
// Data out.
func (e *encoder) value(v quorum.Value) {
	data := v.Data != "" && !e.noData
	n := valueFields
	switch {
	case data || e.later > 0:
		n = valueFields + 2
	case v.Config != nil:
		n = valueFields + 1
	}
	e.fields(n)
	e.bool(v.Held)
	e.str(string(v.Holder))
	e.uint(v.HolderInc)
	e.uint(v.Epoch)
	e.duration(v.TTL)
	e.ballot(v.Lease)
	switch {
	case v.Config != nil:
		e.membership(v.Config)
	case n > valueFields:
		e.b = append(e.b, 0xc0) // nil
	}
	if n > valueFields+1 {
		e.bin(v.Data)
	}
	e.end()
}

func (e *encoder) names(ns []quorum.NodeID) {
	e.array(len(ns))
	for _, n := range ns {
		e.str(string(n))
	}
}

// membership encodes a voter configuration.
func (e *encoder) membership(m *quorum.Membership) {
	if m.EpochFloor != 0 {
		// A field of version 2, written only when it says something: a
		// node of version 1 refuses a configuration with more fields
		// (finish an upgrade from version 1 before changing voters).
		e.fields(membershipFields + 1)
	} else {
		e.fields(membershipFields)
	}
	e.uint(m.ID)
	e.names(m.Voters)
	e.names(m.Retired)
	e.bool(m.Pending)
	e.names(m.Prev)
	e.array(len(m.Joined))
	for _, j := range m.Joined {
		e.fields(joinedFields)
		e.str(string(j.ID))
		e.uint(j.Inc)
		e.end()
	}
	if m.EpochFloor != 0 {
		e.uint(m.EpochFloor)
	}
	e.end()
}

// EncodeRequest encodes a request as a transport body (KindRequest).
func EncodeRequest(r *quorum.Request) []byte {
	e := encoder{b: make([]byte, 0, requestStart)}
	e.request(r)
	return e.b
}

// requestStart and responseStart are the buffers a request's and a
// response's encodings start with (see sizeFor).
const (
	requestStart  = 160
	responseStart = 128
)

// sizeFor makes room for the rest of a list of n elements, the first of
// which was encoded from start: one more copy of a buffer that holds one
// element, instead of a copy at every doubling of one that holds thousands.
// The operations of a batch (a renewal's, say) and their results weigh
// about the same.
func (e *encoder) sizeFor(start, n int) {
	e.b = slices.Grow(e.b, (len(e.b)-start)*(n-1)*9/8+8)
}

func (e *encoder) request(r *quorum.Request) {
	e.b = append(e.b, KindRequest)
	e.fields(requestFields)
	e.uint(r.Config)
	e.str(string(r.From))
	e.str(string(r.To))
	e.array(len(r.Ops))
	start := len(e.b)
	for i := range r.Ops {
		if i == 1 {
			e.sizeFor(start, len(r.Ops))
		}
		op := &r.Ops[i]
		if op.Observe != 0 && !e.noData {
			e.fields(opFields + 1)
		} else {
			e.fields(opFields)
		}
		e.uint(op.ID)
		e.uint(uint64(op.Kind))
		e.str(op.Key)
		e.ballot(op.Ballot)
		e.uint(op.Inc)
		e.value(op.Value)
		e.ballot(op.Next)
		observe := op.Observe != 0 && !e.noData
		var flags uint64
		if op.Watch {
			flags |= flagWatch
		}
		if op.IfFree {
			flags |= flagIfFree
		}
		if op.Migrate {
			flags |= flagMigrate
		}
		e.uint(flags)
		if observe {
			e.duration(op.Observe)
		}
		e.end()
	}
	e.end()
}

// EncodeResponse encodes a response as a transport body (KindResponse).
func EncodeResponse(r *quorum.Response) []byte {
	e := encoder{b: make([]byte, 0, responseStart)}
	e.response(r)
	return e.b
}

// EncodeRequestFor and EncodeResponseFor encode for a node that speaks
// protocol version v: before Version3, without lease values and
// observations, which such a node would skip or refuse (the mesh does not
// send it operations that need them).
func EncodeRequestFor(r *quorum.Request, v int) []byte {
	return AppendRequestFor(make([]byte, 0, requestStart), r, v)
}

// AppendRequestFor is EncodeRequestFor appending to dst, so that a caller
// may reuse a buffer across requests (the encoding of a renewal batch of
// thousands of operations is hundreds of kilobytes).
func AppendRequestFor(dst []byte, r *quorum.Request, v int) []byte {
	e := encoder{b: dst, noData: v < Version3}
	e.request(r)
	return e.b
}

func EncodeResponseFor(r *quorum.Response, v int) []byte {
	e := encoder{b: make([]byte, 0, responseStart), noData: v < Version3}
	e.response(r)
	return e.b
}

// response encodes r: the acceptor's configuration follows the results
// when it is there, and then the lives of r.Lives (version 3; the
// configuration then nil when absent).
func (e *encoder) response(r *quorum.Response) {
	e.b = append(e.b, KindResponse)
	lives := len(r.Lives) > 0 && !e.noData || e.later > 0
	optional := r.Members != nil || lives
	switch {
	case lives:
		e.fields(responseFields + 2)
	case optional:
		e.fields(responseFields + 1)
	default:
		e.fields(responseFields)
	}
	e.uint(r.Config)
	e.str(string(r.From))
	e.uint(r.Inc)
	e.uint(uint64(r.Status))
	e.array(len(r.Results))
	start := len(e.b)
	for i := range r.Results {
		if i == 1 {
			e.sizeFor(start, len(r.Results))
		}
		res := &r.Results[i]
		e.fields(resultFields)
		e.uint(res.ID)
		e.bool(res.OK)
		e.uint(uint64(res.Reason))
		e.ballot(res.Promised)
		e.ballot(res.Accepted)
		e.value(res.Value)
		e.duration(res.Remaining)
		e.uint(res.MaxEpoch)
		var flags uint64
		if res.Copy {
			flags |= resultCopy
		}
		e.uint(flags)
		e.end()
	}
	switch {
	case r.Members != nil:
		e.membership(r.Members)
	case optional:
		e.b = append(e.b, 0xc0) // nil
	}
	if lives {
		e.array(len(r.Lives))
		for _, l := range r.Lives {
			e.array(2)
			e.str(string(l.Node))
			e.uint(l.Inc)
		}
	}
	e.end()
}

// EncodeNotify encodes a notification as a transport body (KindNotify).
func EncodeNotify(n *quorum.Notify) []byte {
	e := encoder{b: make([]byte, 0, 32+32*len(n.Keys))}
	e.notify(n)
	return e.b
}

func (e *encoder) notify(n *quorum.Notify) {
	e.b = append(e.b, KindNotify)
	changes := len(n.Changes) > 0 && !e.noData
	if changes {
		e.fields(notifyFields + 1)
	} else {
		e.fields(notifyFields)
	}
	e.uint(n.Config)
	e.str(string(n.From))
	e.str(string(n.To))
	e.array(len(n.Keys))
	for _, k := range n.Keys {
		e.str(k)
	}
	e.array(len(n.Promised))
	for _, c := range n.Promised {
		e.uint(c)
	}
	if changes {
		e.array(len(n.Changes))
		for i := range n.Changes {
			c := &n.Changes[i]
			if c.Copy {
				e.fields(changeFields + 1)
			} else {
				e.fields(changeFields)
			}
			e.str(c.Key)
			e.ballot(c.Accepted)
			e.value(c.Value)
			e.duration(c.Remaining)
			if c.Copy {
				e.bool(true)
			}
			e.end()
		}
	}
	e.end()
}

func (d *decoder) ballot() quorum.Ballot {
	n := d.fields(ballotFields)
	b := quorum.Ballot{Counter: d.uint(), Incarnation: d.uint(), Node: d.name()}
	d.rest(n, ballotFields)
	return b
}

func (d *decoder) value() quorum.Value {
	n := d.fields(valueFields)
	v := quorum.Value{
		Held: d.bool(), Holder: d.name(), HolderInc: d.uint(),
		Epoch: d.uint(), TTL: d.duration(), Lease: d.ballot(),
	}
	if n > valueFields && !d.isNil() {
		v.Config = d.membership()
	}
	if n > valueFields+1 {
		v.Data = d.bin(d.maxValue)
	}
	d.rest(n, valueFields+2)
	return v
}

// nodeList reads a list of node names, at most limit.
func (d *decoder) nodeList(limit int) []quorum.NodeID {
	n := d.list(limit)
	if d.err != nil || n == 0 {
		return nil
	}
	out := make([]quorum.NodeID, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.name())
	}
	return out
}

func (d *decoder) membership() *quorum.Membership {
	fields := d.fields(membershipFields)
	m := &quorum.Membership{ID: d.uint()}
	m.Voters = d.nodeList(MaxVoters)
	m.Retired = d.nodeList(MaxRetired)
	m.Pending = d.bool()
	m.Prev = d.nodeList(MaxVoters)
	n := d.list(MaxVoters)
	for i := 0; i < n && d.err == nil; i++ {
		f := d.fields(joinedFields)
		m.Joined = append(m.Joined, quorum.Joined{ID: d.name(), Inc: d.uint()})
		d.rest(f, joinedFields)
	}
	known := membershipFields
	if fields > membershipFields {
		m.EpochFloor = d.uint()
		known++
	}
	d.rest(fields, known)
	if d.err == nil {
		if err := m.Validate(); err != nil {
			d.fail("%v", err)
		}
	}
	return m
}

// DecodeRequest decodes and checks a request (KindRequest). Its
// operations come from OpsPool, for the caller to put back.
func (l Limits) DecodeRequest(body []byte) (*quorum.Request, error) {
	if len(body) == 0 || body[0] != KindRequest {
		return nil, fmt.Errorf("%w: not a request", ErrMalformed)
	}
	d := decoder{b: body[1:], maxValue: l.maxValue()}
	fields := d.fields(requestFields)
	r := &quorum.Request{Config: d.uint(), From: d.name(), To: d.name()}
	n := d.list(l.MaxOps)
	d.fits(n, MinOpBytes)
	if d.err == nil {
		r.Ops = OpsPool.Get(n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		op := &r.Ops[i]
		f := d.fields(opFields)
		op.ID = d.uint()
		op.Kind = quorum.OpKind(d.uint())
		op.Key = d.key(l.MaxKeyLen)
		op.Ballot = d.ballot()
		op.Inc = d.uint()
		op.Value = d.value()
		op.Next = d.ballot()
		flags := d.uint()
		op.Watch, op.IfFree, op.Migrate = flags&flagWatch != 0, flags&flagIfFree != 0, flags&flagMigrate != 0
		if f > opFields {
			op.Observe = d.duration()
		}
		d.rest(f, opFields+1)
	}
	d.rest(fields, requestFields)
	if err := d.done("request"); err != nil {
		return nil, err
	}
	if err := l.checkRequest(r); err != nil {
		return nil, err
	}
	return r, nil
}

// DecodeResponse decodes and checks a response (KindResponse). Its
// results come from ResultsPool, for the caller to put back.
func (l Limits) DecodeResponse(body []byte) (*quorum.Response, error) {
	if len(body) == 0 || body[0] != KindResponse {
		return nil, fmt.Errorf("%w: not a response", ErrMalformed)
	}
	d := decoder{b: body[1:], maxValue: l.maxValue()}
	fields := d.fields(responseFields)
	r := &quorum.Response{Config: d.uint(), From: d.name(), Inc: d.uint(), Status: quorum.Status(d.uint())}
	n := d.list(l.MaxOps)
	d.fits(n, MinResultBytes)
	if d.err == nil {
		r.Results = ResultsPool.Get(n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		res := &r.Results[i]
		f := d.fields(resultFields)
		res.ID = d.uint()
		res.OK = d.bool()
		res.Reason = quorum.Reason(d.uint())
		res.Promised = d.ballot()
		res.Accepted = d.ballot()
		res.Value = d.value()
		res.Remaining = d.duration()
		res.MaxEpoch = d.uint()
		if f >= resultFields {
			res.Copy = d.uint()&resultCopy != 0 // other bits: flags of later versions
		}
		d.rest(f, resultFields) // any later fields
	}
	if fields > responseFields && !d.isNil() {
		r.Members = d.membership()
	}
	if fields > responseFields+1 && !d.isNil() {
		k := d.list(maxLives)
		d.fits(k, minLifeBytes)
		for i := 0; i < k && d.err == nil; i++ {
			f := d.header()
			if d.err == nil && f < 2 {
				d.fail("a life of %d fields", f)
			}
			r.Lives = append(r.Lives, quorum.Life{Node: d.name(), Inc: d.uint()})
			d.rest(f, 2)
		}
	}
	d.rest(fields, responseFields+2)
	if err := d.done("response"); err != nil {
		return nil, err
	}
	if err := l.checkResponse(r); err != nil {
		return nil, err
	}
	return r, nil
}

// DecodeNotify decodes and checks a notification (KindNotify).
func (l Limits) DecodeNotify(body []byte) (*quorum.Notify, error) {
	if len(body) == 0 || body[0] != KindNotify {
		return nil, fmt.Errorf("%w: not a notification", ErrMalformed)
	}
	d := decoder{b: body[1:], maxValue: l.maxValue()}
	fields := d.fields(notifyFields)
	n := &quorum.Notify{Config: d.uint(), From: d.name(), To: d.name()}
	k := d.list(l.MaxKeys)
	for i := 0; i < k && d.err == nil; i++ {
		n.Keys = append(n.Keys, d.key(l.MaxKeyLen))
	}
	k = d.list(l.MaxKeys)
	for i := 0; i < k && d.err == nil; i++ {
		n.Promised = append(n.Promised, d.uint())
	}
	if fields > notifyFields {
		k = d.list(l.MaxKeys)
		d.fits(k, minChangeBytes)
		if d.err == nil && k > 0 {
			n.Changes = make([]quorum.Change, 0, k)
		}
		for i := 0; i < k && d.err == nil; i++ {
			f := d.fields(changeFields)
			c := quorum.Change{Key: d.key(l.MaxKeyLen), Accepted: d.ballot(), Value: d.value(), Remaining: d.duration()}
			if f > changeFields {
				c.Copy = d.bool()
			}
			d.rest(f, changeFields+1)
			n.Changes = append(n.Changes, c)
		}
	}
	d.rest(fields, notifyFields+1)
	if err := d.done("notification"); err != nil {
		return nil, err
	}
	if err := l.checkNotify(n); err != nil {
		return nil, err
	}
	return n, nil
}
