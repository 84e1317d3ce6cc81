package mesh

import (
	"fmt"

	"github.com/lockmesh/lockmesh/quorum"
)

// Decoders of the voter-configuration messages: a push (kindPush, one-way,
// from a proposer to a node that is behind) and the answer to a fetch
// (kindConfigReply). Both are go-msgpack (cold data), decoded with
// msgpackHandle, which never preallocates more than MaxInitLen elements
// from an announced length; the configuration is then checked against the
// limits of a configuration and validated, so what reaches the protocol is
// one it could have made. FuzzDecodeConfigPush and FuzzDecodeConfigReply
// drive them.

// decodeConfigPush decodes and checks a configuration push.
func (l limits) decodeConfigPush(body []byte) (*quorum.ConfigPush, error) {
	var push quorum.ConfigPush
	if err := decode(body, kindPush, &push); err != nil {
		return nil, err
	}
	if err := checkName(push.From); err != nil {
		return nil, err
	}
	if err := checkMembership(&push.Members); err != nil {
		return nil, err
	}
	return &push, nil
}

// decodeConfigReply decodes and checks the answer to a configuration fetch.
func (l limits) decodeConfigReply(body []byte) (quorum.Membership, error) {
	var vs quorum.Membership
	if err := decode(body, kindConfigReply, &vs); err != nil {
		return quorum.Membership{}, err
	}
	if err := checkMembership(&vs); err != nil {
		return quorum.Membership{}, err
	}
	return vs, nil
}

// checkMembership refuses a configuration that the protocol could not
// have made: more voters than a configuration may have, more retired
// names than changes can retire, names that are not names, or one that
// does not validate.
func checkMembership(m *quorum.Membership) error {
	if len(m.Voters) > maxVoters || len(m.Prev) > maxVoters || len(m.Joined) > maxVoters {
		return fmt.Errorf("%w: %w: a configuration of %d voters (%d before, %d joined; limit %d)",
			errMalformed, errTooManyOps, len(m.Voters), len(m.Prev), len(m.Joined), maxVoters)
	}
	if len(m.Retired) > maxRetired {
		return fmt.Errorf("%w: %w: %d retired voters (limit %d)", errMalformed, errTooManyOps, len(m.Retired), maxRetired)
	}
	for _, list := range [][]quorum.NodeID{m.Voters, m.Prev, m.Retired} {
		for _, n := range list {
			if err := checkName(n); err != nil {
				return err
			}
		}
	}
	for _, j := range m.Joined {
		if err := checkName(j.ID); err != nil {
			return err
		}
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	return nil
}
