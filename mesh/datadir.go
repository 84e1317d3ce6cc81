package mesh

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/lockmesh/lockmesh/quorum"
)

// The data directory (Config.DataDir) keeps what a voter must not forget
// (quorum.Durable: whether it ever voted, its lease horizon, its epoch and
// ballot marks, its voter configuration and configuration register): a few
// hundred bytes, written when they change, which is rarely — at the first
// vote, at a voter change, and once per block of about a million tokens or
// ballots — never once per lock. Lock registers stay in memory.
//
// One file, lockmesh-state, replaced whole on every save: written to
// lockmesh-state.tmp, synced, renamed over the old one, and the directory
// synced, so that a crash at any moment leaves the old state or the new,
// never a mix. (An embedded database such as bbolt would do the same with
// far more machinery: there is one record, and it is small.) The file is
// JSON, readable by an operator, behind one header line that names the
// format and carries a CRC-32 of the rest, so that a torn or edited file is
// refused rather than believed. A LOCK file, held with flock while the mesh
// runs, keeps two processes from sharing the directory. A third file,
// lockmesh-incarnation, keeps the node's last incarnation (incarnation.go).

const (
	stateFile = "lockmesh-state"
	lockFile  = "LOCK"
	// stateFormat is the newest version of the file's layout this build
	// reads and writes. Format 2 adds the voter's quiet lives
	// (quorum.Durable.Quiet), held only from a restart until the voter
	// votes again; a file without them is written as format 1, which
	// earlier builds read, so a rollback finds a file it knows unless the
	// voter is in the middle of a restart (then it says, clearly, that a
	// newer lockmesh wrote it).
	stateFormat = 2
)

// ErrDataDir is wrapped by every error about the data directory.
var ErrDataDir = errors.New("mesh: data directory")

var errNewerFormat = errors.New("written by a newer lockmesh")

// savedState is the file's JSON body.
type savedState struct {
	// Node is the node's name and Cluster the mesh's (the cluster part of
	// its configuration ids, in hex): a directory of another node or
	// another mesh is refused.
	Node    string `json:"node"`
	Cluster string `json:"cluster"`
	// Founders are the mesh's founding voters, as Config.Voters lists them.
	Founders []string       `json:"founders"`
	Saved    time.Time      `json:"saved"`
	State    quorum.Durable `json:"state"`
}

// dataDir is an open data directory: quorum.Disk for the node's acceptor.
type dataDir struct {
	path string
	lock *os.File
	node string

	mu       sync.Mutex
	founders []string
	saves    int
	last     time.Duration // how long the last save took
	err      error         // the last save's error
}

// openDataDir opens (creating it if need be) and locks the data directory,
// and reads the saved state: nil if there is none yet.
func openDataDir(path, node string) (*dataDir, *savedState, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, nil, fmt.Errorf("%w %s: %v", ErrDataDir, path, err)
	}
	lf, err := os.OpenFile(filepath.Join(path, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("%w %s: %v", ErrDataDir, path, err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, nil, fmt.Errorf("%w %s is in use by another process (%v): one node per data directory", ErrDataDir, path, err)
	}
	d := &dataDir{path: path, lock: lf, node: node}
	st, err := d.load()
	if err != nil {
		d.close()
		return nil, nil, err
	}
	if st != nil && st.Node != node {
		d.close()
		return nil, nil, fmt.Errorf("%w %s belongs to node %q, not %q: give each node its own directory", ErrDataDir, path, st.Node, node)
	}
	return d, st, nil
}

// load reads the state file; a missing file is no state.
func (d *dataDir) load() (*savedState, error) {
	name := filepath.Join(d.path, stateFile)
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", ErrDataDir, name, err)
	}
	st, err := decodeState(b)
	if errors.Is(err, errNewerFormat) {
		return nil, fmt.Errorf("%w: %s: %w; nothing was changed", ErrDataDir, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w; nothing was changed (restore the file, or, if it is lost for good, remove this node from the voters and start it under a new name with an empty directory)", ErrDataDir, name, err)
	}
	return st, nil
}

// header is the state file's first line.
func header(format int, sum uint32) string {
	return fmt.Sprintf("lockmesh-state %d %08x\n", format, sum)
}

func encodeState(st *savedState) ([]byte, error) {
	body, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, err
	}
	body = append(body, '\n')
	format := 1
	if len(st.State.Quiet) > 0 {
		format = 2
	}
	return append([]byte(header(format, crc32.ChecksumIEEE(body))), body...), nil
}

func decodeState(b []byte) (*savedState, error) {
	line, body, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return nil, errors.New("corrupt: no header line")
	}
	var format int
	var sum uint32
	if n, err := fmt.Sscanf(string(line), "lockmesh-state %d %08x", &format, &sum); n != 2 || err != nil {
		return nil, fmt.Errorf("corrupt: header %q", clip(string(line), 60))
	}
	if format > stateFormat {
		return nil, fmt.Errorf("%w: format %d, and this build reads format %d only: run a lockmesh that reads it", errNewerFormat, format, stateFormat)
	}
	if format < 1 {
		return nil, fmt.Errorf("corrupt: format %d", format)
	}
	if got := crc32.ChecksumIEEE(body); got != sum {
		return nil, fmt.Errorf("corrupt: checksum %08x, header says %08x (a torn or edited file)", got, sum)
	}
	var st savedState
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("corrupt: %v", err)
	}
	if st.Node == "" || st.Cluster == "" {
		return nil, errors.New("corrupt: no node or mesh named")
	}
	if _, err := strconv.ParseUint(st.Cluster, 16, 64); err != nil {
		return nil, fmt.Errorf("corrupt: mesh %q", clip(st.Cluster, 40))
	}
	if err := st.State.Validate(); err != nil {
		return nil, fmt.Errorf("corrupt: %v", err)
	}
	return &st, nil
}

// cluster is the mesh a saved state belongs to.
func (st *savedState) cluster() uint64 {
	c, _ := strconv.ParseUint(st.Cluster, 16, 64)
	return c
}

// setFounders records the founding voters to write with the state.
func (d *dataDir) setFounders(ids []quorum.NodeID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.founders = d.founders[:0]
	for _, id := range ids {
		d.founders = append(d.founders, string(id))
	}
}

// Save writes st durably (quorum.Disk): to a temporary file, synced,
// renamed over the state file, and the directory synced.
func (d *dataDir) Save(st *quorum.Durable) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	start := time.Now()
	err := d.save(st)
	d.last, d.err = time.Since(start), err
	if err == nil {
		d.saves++
	}
	return err
}

func (d *dataDir) save(st *quorum.Durable) error {
	cluster := st.Membership.Cluster()
	if cluster == 0 {
		return fmt.Errorf("%w: saving a state with no configuration", ErrDataDir)
	}
	b, err := encodeState(&savedState{Node: d.node, Cluster: strconv.FormatUint(cluster, 16),
		Founders: d.founders, Saved: time.Now().UTC(), State: *st})
	if err != nil {
		return fmt.Errorf("%w: encoding the state: %v", ErrDataDir, err)
	}
	if err := replaceFile(d.path, stateFile, b); err != nil {
		return fmt.Errorf("%w: saving %s: %v", ErrDataDir, filepath.Join(d.path, stateFile), err)
	}
	return nil
}

// replaceFile replaces dir's file name with b durably: b is written to
// name.tmp, synced, renamed over name, and the directory synced, so that a
// crash at any moment leaves the old file or the new one.
func replaceFile(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err == nil {
		err = syncDir(dir)
	}
	return err
}

func syncDir(path string) error {
	dir, err := os.Open(path)
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// DataDirStatus is what Status says of the data directory.
type DataDirStatus struct {
	Path string `json:"path"`
	// Saves counts the state's saves since the node started; LastSave is
	// how long the last one took.
	Saves    int           `json:"saves"`
	LastSave time.Duration `json:"last_save_ns"`
	// Error is the last save's error: the node has stopped voting.
	Error string `json:"error,omitempty"`
}

func (d *dataDir) status() *DataDirStatus {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st := &DataDirStatus{Path: d.path, Saves: d.saves, LastSave: d.last}
	if d.err != nil {
		st.Error = d.err.Error()
	}
	return st
}

// close releases the directory's lock.
func (d *dataDir) close() {
	if d == nil || d.lock == nil {
		return
	}
	syscall.Flock(int(d.lock.Fd()), syscall.LOCK_UN)
	d.lock.Close()
	d.lock = nil
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
