package wire

import (
	"github.com/lockmesh/lockmesh/internal/slicepool"
	"github.com/lockmesh/lockmesh/quorum"
)

// OpsPool and ResultsPool hold the slices the decoders fill: the operations
// of a request (DecodeRequest) and the results of a response
// (DecodeResponse). A decoded slice is its caller's; once the node has
// stepped it (quorum.Node.Step is done with both when it returns), the
// caller puts it back. The mesh also takes from OpsPool its copies of the
// requests it queues for sending, and puts them back once encoded.
var (
	OpsPool     slicepool.Pool[quorum.Op]
	ResultsPool slicepool.Pool[quorum.Result]
)
