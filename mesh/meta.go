package mesh

import (
	"fmt"

	"github.com/hashicorp/memberlist"
	"github.com/lockmesh/lockmesh/mesh/internal/wire"
)

// nodeMeta is what a node tells the others through gossip metadata: its
// ballot address, incarnation, configuration, and from protocol version 2
// its settings (wire.Meta says what each field is).
type nodeMeta struct{ wire.Meta }

func (m nodeMeta) encode() ([]byte, error) {
	b, err := m.Meta.Encode()
	if err != nil {
		return nil, err
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: gossip metadata of %d bytes (limit %d): shorten node names",
			ErrInvalidConfig, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

func decodeMeta(b []byte) (nodeMeta, error) {
	m, err := wire.DecodeMeta(b)
	return nodeMeta{m}, err
}
