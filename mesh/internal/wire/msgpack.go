package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// The hand-written msgpack of the hot ballot messages (requests, responses,
// notifications) and of the hello payload: each struct is an array of its
// fields in a fixed order. go-msgpack's reflection costs about 20 µs per
// message on this kind of machine, a third of a loopback round trip; this
// costs well under one. The decoder trusts nothing: every length is checked
// against what remains and against the limits before anything is allocated.
//
// A struct's array may be longer than the fields this version knows: a
// later version appended fields, which are skipped (msgpack arrays carry
// their length, so the decoder knows how many there are; skip walks any
// msgpack value without allocating). It may not be shorter than the fields
// that every version has sent.

// encoder appends msgpack to a buffer.
type encoder struct {
	b []byte
	// later, when set (by tests only), makes the encoder write as a later
	// version might: that many more fields, of assorted types, after every
	// struct's own (see fields and end).
	later int
	// noData writes for a node of a version before 3: without Value.Data,
	// Op.Observe and Notify.Changes, which it would skip or refuse.
	noData bool
}

// fields writes the header of a struct's array of n fields.
func (e *encoder) fields(n int) { e.array(n + e.later) }

// end ends a struct begun by fields.
func (e *encoder) end() {
	for i := range e.later {
		e.b = append(e.b, laterFields[i%len(laterFields)]...)
	}
}

// laterFields are fields a later version might append: nil, a map, a
// float, an extension, bytes, a nested array.
var laterFields = [][]byte{
	{0xc0},
	{0x81, 0xa1, 'x', 0x92, 0x01, 0xa1, 'y'},
	{0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0},
	{0xd4, 0x01, 0x02},
	{0xc4, 0x02, 0xff, 0xfe},
	{0xdc, 0x00, 0x02, 0x91, 0x90, 0xde, 0x00, 0x00},
}

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

func (e *encoder) float(f float64) {
	e.b = append(e.b, 0xcb)
	e.b = binary.BigEndian.AppendUint64(e.b, math.Float64bits(f))
}

func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 0xc3)
	} else {
		e.b = append(e.b, 0xc2)
	}
}

// bin encodes bytes, held in a string, as msgpack bin.
func (e *encoder) bin(s string) {
	n := len(s)
	switch {
	case n <= math.MaxUint8:
		e.b = append(e.b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		e.b = append(e.b, 0xc5)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(n))
	default:
		e.b = append(e.b, 0xc6)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
	}
	e.b = append(e.b, s...)
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

// decoder reads msgpack from a buffer; the first error sticks.
type decoder struct {
	b   []byte
	err error
	// names remembers the node names of this message: a batch names the
	// same few nodes thousands of times, and each would cost an allocation.
	names [4]string
	// maxValue bounds Value.Data (Limits.MaxValueLen).
	maxValue int
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
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

// advance skips n bytes.
func (d *decoder) advance(n int) {
	if d.need(n) {
		d.b = d.b[n:]
	}
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

// header reads an array header and returns its length, which it checks
// against what remains (each element takes at least a byte).
func (d *decoder) header() int {
	c := d.byte()
	var n uint64
	switch {
	case c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n = d.big(2)
	case c == 0xdd:
		n = d.big(4)
	default:
		d.fail("array expected, found 0x%02x", c)
		return 0
	}
	switch {
	case d.err != nil:
		return 0
	case n > uint64(len(d.b)):
		d.fail("array of %d with %d bytes left", n, len(d.b))
		return 0
	}
	return int(n)
}

// list reads the header of an array of at most limit elements.
func (d *decoder) list(limit int) int {
	n := d.header()
	if d.err == nil && n > limit {
		d.fail("%w: array of %d (limit %d)", ErrTooManyOps, n, limit)
		return 0
	}
	return n
}

// fields reads the header of a struct's array, which must hold at least
// min fields (the ones every version has sent), and returns its length.
// The caller reads the fields it knows, then calls rest.
func (d *decoder) fields(min int) int {
	n := d.header()
	if d.err == nil && n < min {
		d.fail("array of %d fields where at least %d were expected", n, min)
		return 0
	}
	return n
}

// rest skips the fields of a struct's array of n beyond the known ones:
// fields a later version appended.
func (d *decoder) rest(n, known int) {
	for i := known; i < n && d.err == nil; i++ {
		d.skip(0)
	}
}

// maxSkipDepth bounds the nesting of a skipped value: skip recurses.
const maxSkipDepth = 16

// skip reads past one msgpack value of any type, without allocating.
func (d *decoder) skip(depth int) {
	if depth > maxSkipDepth {
		d.fail("%w: a skipped field nests deeper than %d", ErrTooDeep, maxSkipDepth)
		return
	}
	c := d.byte()
	if d.err != nil {
		return
	}
	switch {
	case c <= 0x7f || c >= 0xe0: // positive and negative fixint
	case c&0xf0 == 0x80: // fixmap
		d.skipValues(2*uint64(c&0x0f), depth)
	case c&0xf0 == 0x90: // fixarray
		d.skipValues(uint64(c&0x0f), depth)
	case c&0xe0 == 0xa0: // fixstr
		d.advance(int(c & 0x1f))
	case c == 0xc0 || c == 0xc2 || c == 0xc3: // nil, false, true
	case c == 0xc4 || c == 0xd9: // bin 8, str 8
		d.skipBytes(d.big(1))
	case c == 0xc5 || c == 0xda:
		d.skipBytes(d.big(2))
	case c == 0xc6 || c == 0xdb:
		d.skipBytes(d.big(4))
	case c == 0xc7: // ext 8: length, type, data
		d.skipBytes(d.big(1) + 1)
	case c == 0xc8:
		d.skipBytes(d.big(2) + 1)
	case c == 0xc9:
		d.skipBytes(d.big(4) + 1)
	case c == 0xca || c == 0xce || c == 0xd2: // float 32, uint 32, int 32
		d.advance(4)
	case c == 0xcb || c == 0xcf || c == 0xd3:
		d.advance(8)
	case c == 0xcc || c == 0xd0:
		d.advance(1)
	case c == 0xcd || c == 0xd1:
		d.advance(2)
	case c >= 0xd4 && c <= 0xd8: // fixext 1, 2, 4, 8, 16: type and data
		d.advance(1 + 1<<(c-0xd4))
	case c == 0xdc:
		d.skipValues(d.big(2), depth)
	case c == 0xdd:
		d.skipValues(d.big(4), depth)
	case c == 0xde:
		d.skipValues(2*d.big(2), depth)
	case c == 0xdf:
		d.skipValues(2*d.big(4), depth)
	default: // 0xc1, never used
		d.fail("0x%02x is not msgpack", c)
	}
}

func (d *decoder) skipBytes(n uint64) {
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("truncated: %d bytes wanted, %d left", n, len(d.b))
		return
	}
	d.advance(int(n))
}

func (d *decoder) skipValues(n uint64, depth int) {
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("%d values with %d bytes left", n, len(d.b))
		return
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		d.skip(depth + 1)
	}
}

// isNil reports whether the next value is nil, and if so reads it.
func (d *decoder) isNil() bool {
	if d.err == nil && len(d.b) > 0 && d.b[0] == 0xc0 {
		d.b = d.b[1:]
		return true
	}
	return false
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

func (d *decoder) float() float64 {
	if c := d.byte(); c != 0xcb && d.err == nil {
		d.fail("float 64 expected, found 0x%02x", c)
		return 0
	}
	return math.Float64frombits(d.big(8))
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

// bin reads msgpack bin of at most limit bytes, as a string.
func (d *decoder) bin(limit int) string {
	c := d.byte()
	var n int
	switch c {
	case 0xc4:
		n = int(d.big(1))
	case 0xc5:
		n = int(d.big(2))
	case 0xc6:
		n = int(d.big(4))
	default:
		d.fail("bin expected, found 0x%02x", c)
		return ""
	}
	if d.err != nil {
		return ""
	}
	if n > limit {
		d.fail("%w: a value of %d bytes (limit %d)", ErrValueTooLarge, n, limit)
		return ""
	}
	if !d.need(n) {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// key reads a lock key, refusing one longer than limit as ErrKeyTooLong.
func (d *decoder) key(limit int) string {
	s := d.str(len(d.b)) // d.str checks the length against what is left
	if len(s) > limit {
		d.fail("%w: key of %d bytes (limit %d)", ErrKeyTooLong, len(s), limit)
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
	s := d.str(MaxNameLen)
	if s != "" {
		copy(d.names[1:], d.names[:len(d.names)-1])
		d.names[0] = s
	}
	return quorum.NodeID(s)
}

// done fails unless the whole input was read.
func (d *decoder) done(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the %s", len(d.b), what)
	}
	return d.err
}

// fits refuses an array of n elements of at least size bytes each that
// the rest of the message cannot hold.
func (d *decoder) fits(n, size int) {
	if d.err == nil && n > len(d.b)/size {
		d.fail("array of %d elements of %d bytes or more, in %d bytes", n, size, len(d.b))
	}
}
