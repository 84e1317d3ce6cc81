package quorum

import "testing"

// Rules of voter changes and of restarts that random runs break only with
// faults aimed at their windows (simConfig.Aimed, sim_aimed_test.go). Each
// test turns the aimed faults on for every seed, sets aside the faults that
// only blur the window, and must catch the rule broken within 200 seeds of
// 3 and 5 voters. The scripted scenarios that show each rule one at a time
// stay (voter_change_test.go, listing_test.go,
// sim_bugs_recovery_test.go).

// aimedChanges: aimed faults around voter changes, on disks. The crash of a
// majority and the full restart are set aside, and so are the random
// partitions, which cut off the voters an episode needs to reach as often
// as any other.
func aimedChanges(c *simConfig) {
	c.Aimed, c.Reconfig, c.Disks = true, true, true
	c.MajorityCrash, c.FullRestart, c.Partitions = false, false, false
}

// aimedRestarts: aimed faults with no voter change, so that every episode
// restarts a majority; memory only unless disks.
func aimedRestarts(disks bool) func(*simConfig) {
	return func(c *simConfig) {
		c.Aimed, c.Reconfig, c.Disks, c.DisklessVoter = true, false, disks, false
		c.MajorityCrash, c.FullRestart, c.WallBack = false, false, false
	}
}

// Moving keys into new voters after listing them at one voter before the
// change, not at a majority: a voter cut off while a key was taken lists
// nothing of it, drives two changes, and the key lives on at a minority
// of the voters; a majority without it grants it again beside its holder,
// gone quiet (I1), or a read finds it free (I8).
//
// Only a key the listing voter never held is lost, so the voters drop idle
// registers (smallRegisters: keys come and go), and the damage shows only
// to an operation on that key before its holder's lease ends, so the nodes
// run four clients each. In seeds 1-200 with 3 and 5 voters the rule
// broken broke I1 in 3 runs of 400 and I8 in one (seed 8, 3 voters,
// first); with two clients, none in 400; with the random partitions on as
// well, 2 in 400. Few, as the damage needs a chain of chances: a key granted
// for the first time while the voter is away, held on past its return by
// a node that does not vote, two changes of which one removes a voter
// that holds the key, and an operation on it at a majority without it
// before the lease ends.
func TestCheckerCatchesListingFromOneVoter(t *testing.T) {
	findViolation(t, "list-from-one", "I1|I8", 200, func(c *simConfig) {
		aimedChanges(c)
		smallRegisters(c)
		c.Clients = 4
	})
}

// A voter that restarts while a change is pending catching up from the new
// voters only: with the voters before the change that saw the last writes
// cut off, it learns what a voter that missed them holds, and goes live
// on it. By then every lease of before has ended (its quarantine, during
// which no majority of the voters before the change could form, saw to
// that), and epochs rest on the wall clock: mostly a read of such a key
// sees the register go back (I8), so half the clients' operations are
// reads. In seeds 1-200 with 3 and 5 voters the rule broken broke I8 in
// 12 runs of 400 and I2 in one (seed 22, 3 voters, first); with the
// usual share of reads, 5 in 400.
func TestCheckerCatchesPendingCatchUpFromNewVotersOnly(t *testing.T) {
	findViolation(t, "skip-prev-catch-up", "I8|I2", 200, func(c *simConfig) {
		aimedChanges(c)
		c.ReadShare = 0.5
	})
}

// Concluding a full restart once a majority of the voters says it is
// recovering, not once every voter has answered: a majority restarted
// together, cut off from the voters that kept their state, goes live on
// its own word with empty registers, and grants keys at ballots below
// those the others hold. Once an operation meets one of those, it takes
// the older value for the register's: a read returns it (I8), an acquire
// finds the older grant ended and grants the key beside the new holder
// (I1). Random runs with majority crashes rarely cut
// the restarted voters off (see TestCheckerCatchesFullRestartOnAMajority);
// aimed restarts do, and memory only (with disks the restarted majority
// goes live on its disks' word by rule). In seeds 1-200 with 3 and 5
// voters the rule broken broke I1 in 59 runs of 400 and I8 in 23 (seed
// 5, 3 voters, first).
func TestCheckerCatchesFullRestartOnAMajorityAtRandom(t *testing.T) {
	findViolation(t, "floor-on-majority", "I1|I8", 200, aimedRestarts(false))
}

// A voter restarted from its disk that forgets its ballot mark: a majority
// restarted together goes live on its disks' word (restartedMajority), and
// without the marks its proposers' first ballots rank below what the voters
// that kept their state hold: a read takes an older value for the
// register's (I8), or an acquire an older, ended grant, and grants the key
// beside its holder (I1). In seeds 1-200 with 3 and 5 voters the rule
// broken broke I1 in 38 runs of 400 and I8 in 23 (seed 9, 5 voters,
// first).
func TestCheckerCatchesForgottenBallotMarkAtRandom(t *testing.T) {
	findViolation(t, "ignore-ballot-mark", "I1|I8", 200, aimedRestarts(true))
}
