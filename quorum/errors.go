package quorum

import "errors"

var (
	// ErrBadMembership: a voter configuration that cannot decide anything.
	ErrBadMembership = errors.New("quorum: bad voter configuration")
	// ErrBadConfig: a proposer or acceptor configuration that is unsafe or
	// incomplete.
	ErrBadConfig = errors.New("quorum: bad configuration")
	// ErrBadKey: an empty key.
	ErrBadKey = errors.New("quorum: bad key")
	// ErrBadOptions: acquire options that are unsafe or incomplete.
	ErrBadOptions = errors.New("quorum: bad options")
	// ErrBusy: the key already has an operation of this kind from this node.
	ErrBusy = errors.New("quorum: operation already in progress")
	// ErrNotHeld: this node holds no lease with that key and epoch.
	ErrNotHeld = errors.New("quorum: lease not held")
	// ErrBadChange: a voter change that is not allowed.
	ErrBadChange = errors.New("quorum: bad voter change")
)
