package mesh

import (
	"fmt"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"
)

// nodeMeta is what a node tells the others through gossip metadata.
type nodeMeta struct {
	// RPC is the ballot transport address to dial.
	RPC string `codec:"rpc"`
	// Expect is the node's BootstrapExpect (0: not bootstrapping).
	Expect int `codec:"be,omitempty"`
	// Config is the id of the voter configuration the node uses, once it
	// has one; a node that sees a newer one fetches it from this node.
	Config uint64 `codec:"cid,omitempty"`
	// Inc is the node's incarnation (a new one at every start): the one a
	// voter change records when it adds this node.
	Inc uint64 `codec:"inc,omitempty"`
	// NoVote: the autopilot must not make this node a voter.
	NoVote bool `codec:"nv,omitempty"`
}

func (m nodeMeta) encode() ([]byte, error) {
	var b []byte
	if err := codec.NewEncoderBytes(&b, msgpackHandle).Encode(m); err != nil {
		return nil, err
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: gossip metadata of %d bytes (limit %d): shorten node names",
			ErrInvalidConfig, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

func decodeMeta(b []byte) (nodeMeta, error) {
	var m nodeMeta
	if len(b) == 0 {
		return m, fmt.Errorf("%w: empty node metadata", errMalformed)
	}
	if len(b) > memberlist.MetaMaxSize {
		return m, fmt.Errorf("%w: node metadata of %d bytes", errMalformed, len(b))
	}
	if err := codec.NewDecoderBytes(b, msgpackHandle).Decode(&m); err != nil {
		return m, fmt.Errorf("%w: node metadata: %v", errMalformed, err)
	}
	return m, nil
}
