package mesh

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// The hot ballot messages (requests, responses, notifications) are encoded
// by hand, in plain msgpack: each struct as an array of its fields in a
// fixed order. go-msgpack's reflection costs about 20 µs per message on this
// kind of machine, a third of a loopback round trip; this costs well under
// one. Cold data (gossip metadata, catch-up transfers) still goes through
// go-msgpack. The decoder trusts nothing: every length is checked against
// what remains and against the limits before anything is allocated.

// encoder appends msgpack to a buffer.
type encoder struct{ b []byte }

func (e *encoder) array(n int) {
	switch {
	case n < 16:
		e.b = append(e.b, 0x90|byte(n))
	case n <= math.MaxUint16:
		e.b = append(e.b, 0xdc)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(n))
	default:
		e.b = append(e.b, 0xdd)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
	}
}

func (e *encoder) uint(v uint64) {
	switch {
	case v < 128:
		e.b = append(e.b, byte(v))
	case v <= math.MaxUint8:
		e.b = append(e.b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		e.b = append(e.b, 0xcd)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(v))
	case v <= math.MaxUint32:
		e.b = append(e.b, 0xce)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(v))
	default:
		e.b = append(e.b, 0xcf)
		e.b = binary.BigEndian.AppendUint64(e.b, v)
	}
}

// duration encodes a duration; the protocol's are never negative.
func (e *encoder) duration(d time.Duration) { e.uint(uint64(max(d, 0))) }

func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 0xc3)
	} else {
		e.b = append(e.b, 0xc2)
	}
}

func (e *encoder) str(s string) {
	n := len(s)
	switch {
	case n < 32:
		e.b = append(e.b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		e.b = append(e.b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		e.b = append(e.b, 0xda)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(n))
	default:
		e.b = append(e.b, 0xdb)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
	}
	e.b = append(e.b, s...)
}

func (e *encoder) ballot(b quorum.Ballot) {
	e.array(3)
	e.uint(b.Counter)
	e.uint(b.Incarnation)
	e.str(string(b.Node))
}

// value encodes v; the configuration register's value has a seventh field.
func (e *encoder) value(v quorum.Value) {
	if v.Config != nil {
		e.array(7)
	} else {
		e.array(6)
	}
	e.bool(v.Held)
	e.str(string(v.Holder))
	e.uint(v.HolderInc)
	e.uint(v.Epoch)
	e.duration(v.TTL)
	e.ballot(v.Lease)
	if v.Config != nil {
		e.membership(v.Config)
	}
}

func (e *encoder) names(ns []quorum.NodeID) {
	e.array(len(ns))
	for _, n := range ns {
		e.str(string(n))
	}
}

// membership encodes a voter configuration.
func (e *encoder) membership(m *quorum.Membership) {
	e.array(6)
	e.uint(m.ID)
	e.names(m.Voters)
	e.names(m.Retired)
	e.bool(m.Pending)
	e.names(m.Prev)
	e.array(len(m.Joined))
	for _, j := range m.Joined {
		e.array(2)
		e.str(string(j.ID))
		e.uint(j.Inc)
	}
}

const (
	flagWatch   = 1
	flagIfFree  = 2
	flagMigrate = 4
)

func encodeRequest(r *quorum.Request) []byte {
	e := encoder{b: make([]byte, 0, 64+96*len(r.Ops))}
	e.b = append(e.b, kindRequest)
	e.array(4)
	e.uint(r.Config)
	e.str(string(r.From))
	e.str(string(r.To))
	e.array(len(r.Ops))
	for i := range r.Ops {
		op := &r.Ops[i]
		e.array(8)
		e.uint(op.ID)
		e.uint(uint64(op.Kind))
		e.str(op.Key)
		e.ballot(op.Ballot)
		e.uint(op.Inc)
		e.value(op.Value)
		e.ballot(op.Next)
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
	}
	return e.b
}

func encodeResponse(r *quorum.Response) []byte {
	e := encoder{b: make([]byte, 0, 64+64*len(r.Results))}
	e.b = append(e.b, kindResponse)
	if r.Members != nil {
		e.array(6) // the acceptor's configuration follows the results
	} else {
		e.array(5)
	}
	e.uint(r.Config)
	e.str(string(r.From))
	e.uint(r.Inc)
	e.uint(uint64(r.Status))
	e.array(len(r.Results))
	for i := range r.Results {
		res := &r.Results[i]
		e.array(9)
		e.uint(res.ID)
		e.bool(res.OK)
		e.uint(uint64(res.Reason))
		e.ballot(res.Promised)
		e.ballot(res.Accepted)
		e.value(res.Value)
		e.duration(res.Remaining)
		e.uint(res.MaxEpoch)
		e.uint(0) // reserved
	}
	if r.Members != nil {
		e.membership(r.Members)
	}
	return e.b
}

func encodeNotify(n *quorum.Notify) []byte {
	e := encoder{b: make([]byte, 0, 32+32*len(n.Keys))}
	e.b = append(e.b, kindNotify)
	e.array(5)
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
	return e.b
}

// decoder reads msgpack from a buffer; the first error sticks.
type decoder struct {
	b   []byte
	err error
	// names remembers the node names of this message: a batch names the
	// same few nodes thousands of times, and each would cost an allocation.
	names [4]string
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{errMalformed}, args...)...)
	}
}

func (d *decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || n > len(d.b) {
		d.fail("truncated: %d bytes wanted, %d left", n, len(d.b))
		return false
	}
	return true
}

func (d *decoder) byte() byte {
	if !d.need(1) {
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) big(n int) uint64 {
	if !d.need(n) {
		return 0
	}
	var v uint64
	for i := 0; i < n; i++ {
		v = v<<8 | uint64(d.b[i])
	}
	d.b = d.b[n:]
	return v
}

// array reads an array header and checks its length: exactly want when
// want >= 0, else at most limit (and at most one element per remaining byte).
func (d *decoder) array(want, limit int) int {
	c := d.byte()
	var n int
	switch {
	case c&0xf0 == 0x90:
		n = int(c & 0x0f)
	case c == 0xdc:
		n = int(d.big(2))
	case c == 0xdd:
		n = int(d.big(4))
	default:
		d.fail("array expected, found 0x%02x", c)
		return 0
	}
	switch {
	case d.err != nil:
		return 0
	case want >= 0 && n != want:
		d.fail("array of %d where %d was expected", n, want)
		return 0
	case want < 0 && n > limit:
		d.fail("%w: array of %d (limit %d)", errTooManyOps, n, limit)
		return 0
	case want < 0 && n > len(d.b):
		d.fail("array of %d with %d bytes left", n, len(d.b))
		return 0
	}
	return n
}

func (d *decoder) uint() uint64 {
	c := d.byte()
	switch {
	case c < 0x80:
		return uint64(c)
	case c == 0xcc:
		return d.big(1)
	case c == 0xcd:
		return d.big(2)
	case c == 0xce:
		return d.big(4)
	case c == 0xcf:
		return d.big(8)
	}
	d.fail("unsigned integer expected, found 0x%02x", c)
	return 0
}

func (d *decoder) duration() time.Duration {
	v := d.uint()
	if v > math.MaxInt64 {
		d.fail("duration out of range")
		return 0
	}
	return time.Duration(v)
}

func (d *decoder) bool() bool {
	switch c := d.byte(); c {
	case 0xc2:
		return false
	case 0xc3:
		return true
	default:
		d.fail("boolean expected, found 0x%02x", c)
		return false
	}
}

func (d *decoder) str(limit int) string {
	c := d.byte()
	var n int
	switch {
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == 0xd9:
		n = int(d.big(1))
	case c == 0xda:
		n = int(d.big(2))
	case c == 0xdb:
		n = int(d.big(4))
	default:
		d.fail("string expected, found 0x%02x", c)
		return ""
	}
	if d.err != nil {
		return ""
	}
	if n > limit {
		d.fail("string of %d bytes (limit %d)", n, limit)
		return ""
	}
	if !d.need(n) {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

const maxNameLen = 255

// key reads a lock key, refusing one longer than limit as errKeyTooLong.
func (d *decoder) key(limit int) string {
	s := d.str(len(d.b)) // d.str checks the length against what is left
	if len(s) > limit {
		d.fail("%w: key of %d bytes (limit %d)", errKeyTooLong, len(s), limit)
		return ""
	}
	return s
}

// name reads a node name, reusing one read before in this message.
func (d *decoder) name() quorum.NodeID {
	if d.err == nil && len(d.b) > 0 && d.b[0]&0xe0 == 0xa0 {
		n := int(d.b[0] & 0x1f)
		if n+1 <= len(d.b) {
			raw := d.b[1 : 1+n]
			for _, s := range d.names {
				if s != "" && s == string(raw) {
					d.b = d.b[1+n:]
					return quorum.NodeID(s)
				}
			}
		}
	}
	s := d.str(maxNameLen)
	if s != "" {
		copy(d.names[1:], d.names[:len(d.names)-1])
		d.names[0] = s
	}
	return quorum.NodeID(s)
}

func (d *decoder) ballot() quorum.Ballot {
	d.array(3, 0)
	return quorum.Ballot{Counter: d.uint(), Incarnation: d.uint(), Node: d.name()}
}

// fields reads an array header of lo or hi elements.
func (d *decoder) fields(lo, hi int) int {
	c := byte(0)
	if len(d.b) > 0 {
		c = d.b[0]
	}
	if c&0xf0 != 0x90 {
		d.fail("array of %d or %d fields expected, found 0x%02x", lo, hi, c)
		return 0
	}
	n := d.array(-1, 15) // a fixarray: never more
	if d.err == nil && n != lo && n != hi {
		d.fail("array of %d where %d or %d was expected", n, lo, hi)
	}
	return n
}

func (d *decoder) value() quorum.Value {
	n := d.fields(6, 7)
	v := quorum.Value{
		Held: d.bool(), Holder: d.name(), HolderInc: d.uint(),
		Epoch: d.uint(), TTL: d.duration(), Lease: d.ballot(),
	}
	if n == 7 {
		v.Config = d.membership()
	}
	return v
}

// nodeList reads a list of node names, at most limit.
func (d *decoder) nodeList(limit int) []quorum.NodeID {
	n := d.array(-1, limit)
	if d.err != nil || n == 0 {
		return nil
	}
	out := make([]quorum.NodeID, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.name())
	}
	return out
}

// maxRetired bounds the removed voters a configuration lists: one per
// change, and the version counter allows 65535.
const maxRetired = 1 << 16

func (d *decoder) membership() *quorum.Membership {
	d.array(6, 0)
	m := &quorum.Membership{ID: d.uint()}
	m.Voters = d.nodeList(maxVoters)
	m.Retired = d.nodeList(maxRetired)
	m.Pending = d.bool()
	m.Prev = d.nodeList(maxVoters)
	n := d.array(-1, maxVoters)
	for i := 0; i < n && d.err == nil; i++ {
		d.array(2, 0)
		m.Joined = append(m.Joined, quorum.Joined{ID: d.name(), Inc: d.uint()})
	}
	if d.err == nil {
		if err := m.Validate(); err != nil {
			d.fail("%v", err)
		}
	}
	return m
}

func (d *decoder) done(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the %s", len(d.b), what)
	}
	return d.err
}

func (l limits) decodeRequest(body []byte) (*quorum.Request, error) {
	if len(body) == 0 || body[0] != kindRequest {
		return nil, fmt.Errorf("%w: not a request", errMalformed)
	}
	d := decoder{b: body[1:]}
	d.array(4, 0)
	r := &quorum.Request{Config: d.uint(), From: d.name(), To: d.name()}
	n := d.array(-1, l.maxOps)
	d.fits(n, minOpBytes)
	if d.err == nil {
		r.Ops = quorum.MakeOps(n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		op := &r.Ops[i]
		d.array(8, 0)
		op.ID = d.uint()
		op.Kind = quorum.OpKind(d.uint())
		op.Key = d.key(l.maxKeyLen)
		op.Ballot = d.ballot()
		op.Inc = d.uint()
		op.Value = d.value()
		op.Next = d.ballot()
		flags := d.uint()
		op.Watch, op.IfFree, op.Migrate = flags&flagWatch != 0, flags&flagIfFree != 0, flags&flagMigrate != 0
	}
	if err := d.done("request"); err != nil {
		return nil, err
	}
	if err := l.checkRequest(r); err != nil {
		return nil, err
	}
	return r, nil
}

func (l limits) decodeResponse(body []byte) (*quorum.Response, error) {
	if len(body) == 0 || body[0] != kindResponse {
		return nil, fmt.Errorf("%w: not a response", errMalformed)
	}
	d := decoder{b: body[1:]}
	fields := d.fields(5, 6)
	r := &quorum.Response{Config: d.uint(), From: d.name(), Inc: d.uint(), Status: quorum.Status(d.uint())}
	n := d.array(-1, l.maxOps)
	d.fits(n, minResultBytes)
	if d.err == nil {
		r.Results = quorum.MakeResults(n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		res := &r.Results[i]
		d.array(9, 0)
		res.ID = d.uint()
		res.OK = d.bool()
		res.Reason = quorum.Reason(d.uint())
		res.Promised = d.ballot()
		res.Accepted = d.ballot()
		res.Value = d.value()
		res.Remaining = d.duration()
		res.MaxEpoch = d.uint()
		d.uint() // reserved
	}
	if fields == 6 {
		r.Members = d.membership()
	}
	if err := d.done("response"); err != nil {
		return nil, err
	}
	if err := l.checkResponse(r); err != nil {
		return nil, err
	}
	return r, nil
}

func (l limits) decodeNotify(body []byte) (*quorum.Notify, error) {
	if len(body) == 0 || body[0] != kindNotify {
		return nil, fmt.Errorf("%w: not a notification", errMalformed)
	}
	d := decoder{b: body[1:]}
	d.array(5, 0)
	n := &quorum.Notify{Config: d.uint(), From: d.name(), To: d.name()}
	k := d.array(-1, l.maxKeys)
	for i := 0; i < k && d.err == nil; i++ {
		n.Keys = append(n.Keys, d.key(l.maxKeyLen))
	}
	k = d.array(-1, l.maxKeys)
	for i := 0; i < k && d.err == nil; i++ {
		n.Promised = append(n.Promised, d.uint())
	}
	if err := d.done("notification"); err != nil {
		return nil, err
	}
	if err := l.checkNotify(n); err != nil {
		return nil, err
	}
	return n, nil
}
