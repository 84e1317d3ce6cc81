package quorumtest

import (
	"testing"
	"time"
)

// An entry of a scripted history: an operation, or (kind Amnesia) a full
// restart at call.
type scripted struct {
	client    int
	call, ret int64
	in        Input
	out       Output
}

func granted(holder string, epoch uint64, client int, call, ret int64) scripted {
	return scripted{client, call, ret, Input{Kind: Acquire, Holder: holder}, Output{Outcome: Granted, Epoch: epoch}}
}

// ghost is a write of unknown outcome of an acquire: at one of epochs, or,
// with none, at any epoch.
func ghost(holder string, client int, call, ret int64, epochs ...uint64) scripted {
	out := Output{Outcome: NoQuorum, Unknown: true, Attempted: epochs, AnyEpoch: len(epochs) == 0}
	return scripted{client, call, ret, Input{Kind: Acquire, Holder: holder}, out}
}

func locked(holder, by string, epoch uint64, client int, call, ret int64) scripted {
	return scripted{client, call, ret, Input{Kind: Acquire, Holder: holder}, Output{Outcome: Locked, Holder: by, Epoch: epoch}}
}

func release(holder string, epoch uint64, outcome string, client int, call, ret int64) scripted {
	return scripted{client, call, ret, Input{Kind: Release, Holder: holder, Epoch: epoch}, Output{Outcome: outcome}}
}

func cleanup(holder string, epoch uint64, client int, call, ret int64) scripted {
	return scripted{client, call, ret, Input{Kind: Cleanup, Holder: holder}, Output{Outcome: Released, Epoch: epoch}}
}

// read is a read of the register (the simulator's and the mesh tests');
// live is one through the public API (the fault suite's).
func read(holder string, held bool, epoch uint64, client int, call, ret int64) scripted {
	return scripted{client, call, ret, Input{Kind: Read, Holder: "r/1"}, Output{Outcome: ReadDone, Held: held, Holder: holder, Epoch: epoch}}
}

func live(holder string, held bool, epoch uint64, client int, call, ret int64) scripted {
	s := read(holder, held, epoch, client, call, ret)
	s.out.Live = true
	return s
}

// atLeast marks a read that found the register dropped at a majority: free
// at some epoch no higher than the one it reports.
func atLeast(r scripted) scripted {
	r.out.AtLeast = true
	return r
}

func amnesia(at int64) scripted { return scripted{call: at, in: Input{Kind: Amnesia}} }

func majorityLost(at int64) scripted { return scripted{call: at, in: Input{Kind: MajorityLost}} }

func historyOf(name string, ops []scripted) *History {
	h := NewHistory()
	h.SetName(name)
	for _, o := range ops {
		switch o.in.Kind {
		case Amnesia:
			h.Amnesia(o.call)
			continue
		case MajorityLost:
			h.MajorityLoss(o.call)
			continue
		}
		h.Add("k", o.client, o.in, o.out, o.call, o.ret)
	}
	return h
}

// The model accepts what the system may do and rejects what breaks its
// rules; each illegal history breaks one rule on purpose. Holders are
// "node/inc"; times are arbitrary units.
func TestModel(t *testing.T) {
	t.Setenv("LOCKMESH_ARTIFACTS", t.TempDir())
	for _, tc := range []struct {
		name  string
		ops   []scripted
		legal bool
	}{
		// Grants and releases.
		{"grant, release, grant", []scripted{
			granted("a/1", 10, 0, 0, 10), release("a/1", 10, Released, 0, 20, 30),
			granted("b/1", 11, 1, 40, 50), read("b/1", true, 11, 2, 60, 70),
		}, true},
		{"two grants without a release between: the first lease expired", []scripted{
			granted("a/1", 10, 0, 0, 10), granted("b/1", 11, 1, 100, 110),
		}, true},
		{"two grants without a release between, the first read after the second", []scripted{
			granted("a/1", 10, 0, 0, 10), granted("b/1", 11, 1, 100, 110), read("a/1", true, 10, 2, 120, 130),
		}, false},
		{"concurrent grants linearize in token order", []scripted{
			granted("a/1", 11, 0, 0, 50), granted("b/1", 10, 1, 10, 60),
		}, true},
		{"a token going back", []scripted{
			granted("a/1", 20, 0, 0, 10), granted("b/1", 10, 1, 20, 30),
		}, false},
		{"one token granted twice", []scripted{
			granted("a/1", 10, 0, 0, 10), release("a/1", 10, Released, 0, 20, 30), granted("b/1", 10, 1, 40, 50),
		}, false},
		{"a release of someone else's grant", []scripted{
			granted("a/1", 10, 0, 0, 10), release("b/1", 10, Released, 1, 20, 30),
		}, false},
		{"a release of one's own grant said not held", []scripted{
			granted("a/1", 10, 0, 0, 10), release("a/1", 10, NotHeld, 0, 20, 30),
		}, false},
		{"a release of another incarnation's grant", []scripted{
			granted("a/1", 10, 0, 0, 10), release("a/2", 10, Released, 1, 20, 30),
		}, false},

		// Reads.
		{"a read of a grant still in flight", []scripted{
			granted("a/1", 10, 0, 0, 100), read("a/1", true, 10, 1, 20, 30),
		}, true},
		{"a read seeing a value never written", []scripted{
			granted("a/1", 10, 0, 0, 10), read("b/1", true, 15, 1, 20, 30),
		}, false},
		{"a read of free while the grant stands", []scripted{
			granted("a/1", 10, 0, 0, 10), read("", false, 10, 1, 20, 30),
		}, false},
		{"a read of free at an older epoch after a release", []scripted{
			granted("a/1", 10, 0, 0, 10), release("a/1", 10, Released, 0, 20, 30), read("", false, 9, 1, 40, 50),
		}, false},
		{"a live read of an expired lease names its holder", []scripted{
			granted("a/1", 10, 0, 0, 10), live("a/1", false, 10, 1, 2000, 2010),
		}, true},
		{"a live read naming another holder of the token", []scripted{
			granted("a/1", 10, 0, 0, 10), live("b/1", false, 10, 1, 2000, 2010),
		}, false},
		{"a live read of free after a free nobody recorded", []scripted{
			granted("a/1", 10, 0, 0, 10), live("", false, 10, 1, 20, 30), live("", false, 10, 2, 40, 50),
		}, true},
		{"a live read of free at another epoch", []scripted{
			granted("a/1", 10, 0, 0, 10), live("", false, 11, 1, 20, 30),
		}, false},
		{"held again after a live read of free", []scripted{
			granted("a/1", 10, 0, 0, 10), live("", false, 10, 1, 20, 30), live("a/1", false, 10, 2, 40, 50),
		}, false},

		// Locked.
		{"locked by the holder", []scripted{
			granted("a/1", 10, 0, 0, 10), locked("b/1", "a/1", 10, 1, 20, 30),
		}, true},
		{"locked by a value of a higher epoch not chosen (yet)", []scripted{
			granted("a/1", 10, 0, 0, 10), locked("b/1", "c/1", 12, 1, 20, 30),
		}, true},
		{"locked by a holder of an older epoch", []scripted{
			granted("a/1", 10, 0, 0, 10), granted("b/1", 11, 1, 20, 30), locked("c/1", "a/1", 10, 2, 40, 50),
		}, false},

		// Writes of unknown outcome.
		{"a ghost write taking effect in its window", []scripted{
			granted("a/1", 10, 0, 0, 10), ghost("b/1", 1, 20, 100, 12), read("b/1", true, 12, 2, 50, 60),
		}, true},
		{"a ghost write that may not have taken effect", []scripted{
			granted("a/1", 10, 0, 0, 10), ghost("b/1", 1, 20, 100, 12), read("a/1", true, 10, 2, 50, 60),
		}, true},
		{"a ghost write taking effect after its window", []scripted{
			ghost("a/1", 0, 0, 10, 30), granted("b/1", 20, 1, 20, 30), read("a/1", true, 30, 2, 40, 50),
		}, false},
		{"the same ghost with its window open", []scripted{
			ghost("a/1", 0, 0, Infinity, 30), granted("b/1", 20, 1, 20, 30), read("a/1", true, 30, 2, 40, 50),
		}, true},
		{"a ghost of unknown epoch, pinned down by a read, released", []scripted{
			granted("a/1", 10, 0, 0, 10), ghost("b/1", 1, 20, Infinity), read("b/1", true, 15, 2, 50, 60),
			release("b/1", 15, Released, 1, 70, 80), read("", false, 15, 2, 90, 100),
		}, true},
		{"a ghost of unknown epoch read below the register's", []scripted{
			granted("a/1", 10, 0, 0, 10), ghost("b/1", 1, 20, Infinity), read("b/1", true, 5, 2, 50, 60),
		}, false},
		{"a wild register says not held to a release of another epoch", []scripted{
			ghost("a/1", 0, 0, 10), release("a/1", 99, NotHeld, 0, 20, 30), read("a/1", true, 7, 1, 40, 50),
		}, true},
		{"a cleanup frees a ghost grant of its node", []scripted{
			ghost("a/1", 0, 0, 10, 12), cleanup("a/1", 12, 0, 20, 30), read("", false, 12, 1, 40, 50),
		}, true},
		{"a cleanup frees another node's grant", []scripted{
			granted("a/1", 10, 0, 0, 10), cleanup("b/1", 10, 1, 20, 30),
		}, false},

		// Full restarts.
		{"after a full restart: never granted, tokens still above", []scripted{
			granted("a/1", 20, 0, 0, 10), amnesia(100), read("", false, 0, 1, 200, 210), granted("b/2", 30, 1, 220, 230),
		}, true},
		{"after a full restart: a token below one granted before", []scripted{
			granted("a/1", 20, 0, 0, 10), amnesia(100), granted("b/2", 15, 1, 220, 230),
		}, false},
		{"after a full restart: a grant above the token before, but not above a later read's", []scripted{
			granted("a/1", 20, 0, 0, 10), amnesia(100), granted("b/2", 30, 1, 200, 210), read("b/2", true, 30, 2, 220, 230),
			granted("c/2", 25, 2, 240, 250),
		}, false},
		{"after a majority lost its state: an older value again", []scripted{
			granted("a/1", 20, 0, 0, 10), release("a/1", 20, Released, 0, 20, 30), majorityLost(100),
			read("a/1", true, 20, 1, 200, 210), granted("b/1", 30, 2, 220, 230), read("b/1", true, 30, 1, 240, 250),
		}, true},
		{"after a majority lost its state, the register still does not change by itself", []scripted{
			granted("a/1", 20, 0, 0, 10), majorityLost(100),
			read("a/1", true, 20, 1, 200, 210), read("", false, 5, 1, 220, 230),
		}, false},
		{"after a majority lost its state: a read that found it dropped at a majority, then a survivor's older value", []scripted{
			granted("a/1", 20, 0, 0, 10), release("a/1", 20, Released, 0, 20, 30), majorityLost(100),
			atLeast(read("", false, 90, 1, 200, 210)), read("", false, 20, 1, 220, 230), granted("b/1", 95, 2, 240, 250),
		}, true},
		{"without a majority lost: a register dropped at a majority and its older value", []scripted{
			granted("a/1", 20, 0, 0, 10), release("a/1", 20, Released, 0, 20, 30),
			atLeast(read("", false, 90, 1, 200, 210)), read("", false, 20, 1, 220, 230),
		}, true},
		{"after a majority lost its state and a survivor's value was read, a register dropped above it with an older value again", []scripted{
			granted("a/1", 20, 0, 0, 10), release("a/1", 20, Released, 0, 20, 30), majorityLost(100),
			read("", false, 20, 1, 200, 210), atLeast(read("", false, 90, 1, 220, 230)), read("", false, 15, 1, 240, 250),
		}, false},
		{"an older value again, without a majority lost", []scripted{
			granted("a/1", 20, 0, 0, 10), release("a/1", 20, Released, 0, 20, 30), read("a/1", true, 20, 1, 200, 210),
		}, false},
		{"never granted, without a full restart", []scripted{
			granted("a/1", 20, 0, 0, 10), read("", false, 0, 1, 200, 210),
		}, false},
		{"a ghost cut by the full restart takes effect after it", []scripted{
			granted("a/1", 20, 0, 0, 10), ghost("c/1", 2, 50, Infinity, 25), amnesia(100), read("c/1", true, 25, 1, 200, 210),
		}, false},
		{"the same ghost without the restart", []scripted{
			granted("a/1", 20, 0, 0, 10), ghost("c/1", 2, 50, Infinity, 25), read("c/1", true, 25, 1, 200, 210),
		}, true},
		{"a ghost of unknown epoch before the restart, a grant of its node after", []scripted{
			ghost("a/1", 0, 0, Infinity), amnesia(100), read("", false, 0, 1, 200, 210), granted("a/2", 5, 0, 220, 230),
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := historyOf(t.Name(), tc.ops)
			bad, unknown := h.Check(10 * time.Second)
			switch {
			case len(unknown) > 0:
				t.Fatalf("the check timed out: %s", h.Explain("k", 20))
			case tc.legal && len(bad) > 0:
				t.Errorf("a legal history is rejected:\n%s", h.Explain("k", 20))
			case !tc.legal && len(bad) == 0:
				t.Errorf("an illegal history is accepted")
			}
		})
	}
}
