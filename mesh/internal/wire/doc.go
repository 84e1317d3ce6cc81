// Package wire holds the codecs of everything a lockmesh node reads from
// the network, in one place for review and fuzzing: the ballot messages
// (requests, responses, notifications; hand-written msgpack, ballot.go),
// the cold messages (catch-ups, voter-configuration pushes and fetch
// replies; go-msgpack, reflect.go), gossip metadata (Meta) and the payload
// of the transport hello (Settings). Every decoder checks what it decodes
// against Limits and refuses, with an error wrapping ErrMalformed, anything
// the protocol could not have sent; nothing is allocated from a length
// before the length is checked against what remains.
//
// # Versions
//
// The format has protocol versions (Version1 to Version3; versions.go says
// what each is). A node speaks the range Supported; two nodes use the
// highest version both speak, and a sender leaves out what the receiver's
// version lacks (the mesh strips OpUnwatch from requests to a node of
// version 1, and lease values and observations from anything it sends a
// node of version 1 or 2: EncodeRequestFor, EncodeResponseFor). A node
// learns a peer's range from the peer's gossip metadata and transport
// hello; one that says nothing of it is of version 1.
//
// # Growing the format
//
// Decoders of version 2 and later skip what they do not know: in the
// hand-written messages, fields appended to a struct's array (msgpack
// arrays carry their length, and skip walks any value); in the go-msgpack
// ones, map keys. So a later version may append a field without breaking
// them, provided that:
//
//   - a field is only ever appended, after every existing one, and an
//     optional field before it (Value's configuration, Response's Members)
//     is then written as nil when absent;
//   - its zero, or its absence, means what an older sender meant;
//   - it is never sent to a node of version 1, whose decoders refuse a
//     longer array than they know: bump MaxVersion for such a change and
//     leave the field out towards a peer whose version is lower, or send
//     it only to peers of a version whose decoders skip it (Response's
//     Lives goes to version 3 only, and needs no version of its own: an
//     earlier build of version 3 skips it, meaning what it always did).
//
// A round-trip test sets every field of every message by reflection and
// fails when one does not survive a round trip; the fuzz targets
// (FuzzDecode*, seed corpora in testdata/fuzz/) drive each decoder:
//
//	go test -run '^$' -fuzz '^FuzzDecodeRequest$' -fuzztime 2m ./mesh/internal/wire/
package wire
