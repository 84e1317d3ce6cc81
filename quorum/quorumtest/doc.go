// Package quorumtest is how lockmesh's tests check that what they saw happen
// to each lock key is linearizable (DESIGN §6, I8). It holds one model of a
// key's register for the porcupine checker, a recorder of operation
// histories (History, with Ghosts for writes of unknown outcome), and the
// check, which fails on a porcupine timeout as on a violation and leaves
// porcupine's drawing of any failed check in a file. The simulator
// (package quorum), the in-process mesh tests (package mesh) and the
// multi-process fault suite (mesh/faulttest) all record into it and check
// with it. Only tests import it.
//
//	h := quorumtest.NewHistory()
//	id := h.Call("k", client, quorumtest.Input{Kind: quorumtest.Acquire, Holder: "a/1"}, now)
//	h.Return(id, quorumtest.Output{Outcome: quorumtest.Granted, Epoch: 7}, later)
//	h.Verify(t, time.Minute) // or Check, then Explain each bad key
//
// # The register
//
// Each key is one CASPaxos register. What a history can know of its value is
// State: free, or held by a holder — a node incarnation ("node/inc"), or a
// node's name in the fault suite, which sees processes from outside — and an
// epoch, the fencing token of the latest grant. Every chosen write moves
// it: an acquire to held by its node at a new epoch above every earlier one
// (C2); a release, or a cleanup (the proposer freeing a grant to itself that
// no lease stands for), to free with the epoch kept, and only for the exact
// holder and epoch (I7); a read writes back what it read. Renewals rewrite
// the same value and are not recorded.
//
// Time is not in the model. A lease ends by expiring, without any write, so
// an acquire may be granted while the register still names another holder:
// the model asks of a grant only that its epoch be above every epoch before
// it. Two grants with no release between are therefore legal here;
// exclusion in time (I1) and the fence (I4) are checked apart, on the
// holders' intervals.
//
// # Why the model is nondeterministic
//
// The model's state is the set of registers the history so far allows; an
// operation steps each of them and keeps what its output permits (the set
// stays small: one element per way of explaining the history). Each branch
// is there because the real system produces it:
//
//   - A write of unknown outcome (a ghost): a round whose accepts went out
//     but whose end its proposer never heard. It may be chosen then, later,
//     or never, and a value that reached a single acceptor can even be
//     adopted by a later prepare that finds it the highest ballot, after its
//     operation returned and after reads that did not see it. So each ghost
//     is an operation of its own (Output.Unknown) whose interval runs from
//     its operation's start until a higher ballot was chosen for the key (the
//     simulator knows when, from every acceptor's view) or, from outside the
//     acceptors, until its writer's next chosen write on the key (Ghosts).
//     Its step leaves the register as it was, or writes: held by its node at
//     one of the epochs it attempted (Attempted), or, when nobody knows which
//     (a crashed node, the fault suite, AnyEpoch), at some epoch above the
//     current one: a Wild register, which a later read, release or cleanup
//     naming that node at a higher epoch pins down.
//   - A release or cleanup of unknown outcome: the register freed, or not.
//   - A release answering "not held" while the register is Wild for its
//     node: the unknown epoch may be another than the release's.
//   - Locked: what blocked an acquire is the register's holder, or a value
//     of a higher epoch that some acceptor accepted and no majority chose
//     (yet): a prepare reports the highest accepted ballot, chosen or not.
//   - A read through the public API (Output.Live): mesh.Holder says "held"
//     only while the lease is live, so an expired grant reads as not held
//     and still names its holder (the register is held all the same), while
//     a free register names nobody. Such a history cannot see the frees a
//     node does in the background (the release of a grant that raced with a
//     give-up, Leave, the release of a lost lease), so a live read of "free
//     at E" also frees a register held at E.
//   - Amnesia: every node was down at once (a full restart), so every
//     register is gone. The key reads as never granted (epoch 0) but every
//     later grant must still be above every epoch before (Floor; DESIGN
//     §3.3). Whatever an operation begun before the restart did, it did
//     before its node died: History ends every such operation there, so no
//     ghost outlives the restart. (A Wild register's unknown epoch is not
//     known to the floor: that bound is its lower one.)
//
// Operations that certainly did nothing and said nothing (no quorum,
// cancelled, a cleanup that declined) are left out of the check: the model
// accepts them in every state, and an abandoned one would overlap every
// later operation. An operation's interval may start at its last round
// (History.Retime): earlier rounds either did nothing or are ghosts.
//
// # Where the recorders differ
//
// The simulator and the mesh tests see every operation result of the core
// (quorum.OpResult): exact attempted epochs, cleanups, raw register reads.
// The fault suite sees only what a client of the public API sees, and
// records accordingly: each acquire's earlier rounds are an AnyEpoch ghost
// ended by its own grant, or by its process's next grant when it was not
// granted; a refusal names the holder (Locked); reads are live; releases
// (nil both when they freed the key and when the lease was already lost)
// and background frees are not recorded; a full restart is an Amnesia.
//
// # Checking
//
// CheckKeys (and Check, Verify over it) runs porcupine per key with a
// timeout; a check that does not finish in time fails like one that finds
// a violation. For each failed check it writes porcupine's visualisation
// (CheckOperationsVerbose, VisualizePath) to ArtifactDir — $LOCKMESH_ARTIFACTS,
// else lockmesh-artifacts under os.TempDir() — in a file named after the
// history (SetName; Verify uses the test's name) and the key, whose path
// Verdict.String and Explain give. In the drawing, each row is a lane of
// one client (ghosts and amnesias get rows of their own), and the tooltip
// of an operation names its client.
package quorumtest
