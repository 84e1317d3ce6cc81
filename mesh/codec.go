package mesh

import (
	"github.com/lockmesh/lockmesh/mesh/internal/wire"
	"github.com/lockmesh/lockmesh/quorum"
)

// The ballot messages travel as transport bodies: one byte naming the kind,
// then the message in msgpack. Their codecs, and the checks of everything
// read from the network against the limits, are in mesh/internal/wire, with
// their fuzz targets; the names below keep the mesh's code short.

// Kinds of body.
const (
	kindRequest      = wire.KindRequest // quorum.Request, answered by kindResponse
	kindResponse     = wire.KindResponse
	kindNotify       = wire.KindNotify  // quorum.Notify, one-way
	kindCatchUp      = wire.KindCatchUp // quorum.CatchUpRequest, answered by kindCatchUpReply
	kindCatchUpReply = wire.KindCatchUpReply
	kindPush         = wire.KindPush        // quorum.ConfigPush, one-way
	kindConfigFetch  = wire.KindConfigFetch // no body; answered by kindConfigReply
	kindConfigReply  = wire.KindConfigReply // quorum.Membership
)

var (
	// errMalformed wraps every decoding failure.
	errMalformed = wire.ErrMalformed
	// Decoding failures that are limits, wrapped by the decoders' errors
	// (which also wrap errMalformed); countLimit counts them.
	errTooManyOps = wire.ErrTooManyOps
	errKeyTooLong = wire.ErrKeyTooLong
	errTooDeep    = wire.ErrTooDeep
	errValueLarge = wire.ErrValueTooLarge
)

// limits bound what one message may carry; the decoders check against
// them.
type limits struct{ wire.Limits }

func (l limits) decodeRequest(b []byte) (*quorum.Request, error)   { return l.DecodeRequest(b) }
func (l limits) decodeResponse(b []byte) (*quorum.Response, error) { return l.DecodeResponse(b) }
func (l limits) decodeNotify(b []byte) (*quorum.Notify, error)     { return l.DecodeNotify(b) }
func (l limits) decodeCatchUp(b []byte) (*quorum.CatchUpRequest, error) {
	return wire.DecodeCatchUp(b)
}
func (l limits) decodeCatchUpReply(b []byte) (*quorum.CatchUpResponse, error) {
	return l.DecodeCatchUpReply(b)
}
func (l limits) decodeConfigPush(b []byte) (*quorum.ConfigPush, error) {
	return wire.DecodeConfigPush(b)
}
func (l limits) decodeConfigReply(b []byte) (quorum.Membership, error) {
	return wire.DecodeConfigReply(b)
}
func (l limits) checkKey(k string) error { return l.CheckKey(k) }

func encodeRequest(r *quorum.Request) []byte   { return wire.EncodeRequest(r) }
func encodeResponse(r *quorum.Response) []byte { return wire.EncodeResponse(r) }
func encodeNotify(n *quorum.Notify) []byte     { return wire.EncodeNotify(n) }

// encode encodes a cold message (go-msgpack) as a body of the given kind.
func encode(kind byte, v any) ([]byte, error) { return wire.Encode(kind, v) }

// decode reads a body of the expected kind into v, checking nothing else:
// network input goes through the limits' decoders.
func decode(body []byte, want byte, v any) error { return wire.Decode(body, want, v) }
