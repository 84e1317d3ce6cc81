package mesh

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"time"
)

// A node's incarnation names one start of it: peers bind its name to the
// process of that incarnation (identity.go), its ballots carry it, and
// voters tell a restarted voter's lives apart by it. It comes from the wall
// clock, so two lives of a node differ, but the mesh's rules compare
// incarnations for equality only: none takes a higher number for a later
// life, since a wall clock stepped back across a restart makes the new life
// look older. (Two live processes with one name are the exception, and cost
// only that name's vote when the clock misleads: checkNamesake.)
//
// With a data directory the incarnation is also above every earlier life's
// of that directory, whatever the wall clock did: the wall clock's
// nanoseconds, or the last life's incarnation plus one if that is higher,
// saved before the node uses it. It is kept in a file of its own,
// lockmesh-incarnation, in the format of the state file (a header line
// with the format and a CRC-32 of the JSON body): the state file is
// written only once the node has a voter configuration, and only by
// voters, while every start needs an incarnation; and a release that does
// not know the file ignores it, so a rollback reads the directory as
// before.

const (
	incarnationFile   = "lockmesh-incarnation"
	incarnationFormat = 1
)

// savedIncarnation is the incarnation file's JSON body.
type savedIncarnation struct {
	Node        string    `json:"node"`
	Incarnation uint64    `json:"incarnation"`
	Saved       time.Time `json:"saved"`
}

// newIncarnation picks this start's incarnation (see above), saving it in
// the data directory if there is one.
func (m *Mesh) newIncarnation() (uint64, error) {
	wall := time.Now()
	if m.cfg.WallClock != nil {
		wall = m.cfg.WallClock()
	}
	inc := uint64(max(wall.UnixNano(), 1))
	if m.dd == nil {
		return inc, nil
	}
	return m.dd.nextIncarnation(inc)
}

// nextIncarnation returns wall, or the directory's last incarnation plus
// one if that is higher, once it is saved as the last.
func (d *dataDir) nextIncarnation(wall uint64) (uint64, error) {
	name := filepath.Join(d.path, incarnationFile)
	b, err := os.ReadFile(name)
	var last uint64
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return 0, fmt.Errorf("%w: reading %s: %v", ErrDataDir, name, err)
	default:
		saved, err := decodeIncarnation(b)
		if err == nil && saved.Node != d.node {
			err = fmt.Errorf("of node %q, not %q: give each node its own directory", saved.Node, d.node)
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %s: %w; nothing was changed (if the file is lost for good, remove it: this node's next incarnation then comes from the wall clock alone)", ErrDataDir, name, err)
		}
		last = saved.Incarnation
	}
	inc := max(wall, last+1)
	b, err = encodeIncarnation(&savedIncarnation{Node: d.node, Incarnation: inc, Saved: time.Now().UTC()})
	if err == nil {
		err = replaceFile(d.path, incarnationFile, b)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: saving %s: %v", ErrDataDir, name, err)
	}
	return inc, nil
}

func encodeIncarnation(s *savedIncarnation) ([]byte, error) {
	body, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	body = append(body, '\n')
	head := fmt.Sprintf("%s %d %08x\n", incarnationFile, incarnationFormat, crc32.ChecksumIEEE(body))
	return append([]byte(head), body...), nil
}

func decodeIncarnation(b []byte) (*savedIncarnation, error) {
	line, body, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return nil, errors.New("corrupt: no header line")
	}
	var format int
	var sum uint32
	if n, err := fmt.Sscanf(string(line), incarnationFile+" %d %08x", &format, &sum); n != 2 || err != nil {
		return nil, fmt.Errorf("corrupt: header %q", clip(string(line), 60))
	}
	if format > incarnationFormat {
		return nil, fmt.Errorf("%w: format %d, and this build reads format %d only", errNewerFormat, format, incarnationFormat)
	}
	if format < 1 {
		return nil, fmt.Errorf("corrupt: format %d", format)
	}
	if got := crc32.ChecksumIEEE(body); got != sum {
		return nil, fmt.Errorf("corrupt: checksum %08x, header says %08x (a torn or edited file)", got, sum)
	}
	var s savedIncarnation
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("corrupt: %v", err)
	}
	// (A later format may add fields: this one reads what it knows.)
	switch {
	case s.Node == "":
		return nil, errors.New("corrupt: no node named")
	case s.Incarnation == 0 || s.Incarnation >= math.MaxUint64-1:
		// MaxUint64 is no node's: acceptors sign their copies of
		// registers with it (Acceptor.copyBallot).
		return nil, fmt.Errorf("corrupt: incarnation %d", s.Incarnation)
	}
	return &s, nil
}
