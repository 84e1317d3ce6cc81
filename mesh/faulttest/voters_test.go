//go:build linux

package faulttest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// voterChangeTimeout is how long a scenario lets one voter change run (it
// moves every key into the new voters before it returns).
const voterChangeTimeout = 30 * time.Second

// voterChange is an add_voter or remove_voter request as the suite saw it.
type voterChange struct {
	via, op, node string
	took          time.Duration          // from the request to the answer
	config        *control.Configuration // what via knew once the change returned
}

func (vc voterChange) String() string {
	what := "add"
	if vc.op == control.OpRemoveVoter {
		what = "remove"
	}
	return fmt.Sprintf("%s %s through %s: %v", what, vc.node, vc.via, vc.took.Round(time.Millisecond))
}

// addVoter asks via to make name a voter (Mesh.AddVoter) and waits for the
// change to return.
func (c *cluster) addVoter(via *node, name string) (voterChange, error) {
	return c.changeVoter(via, control.OpAddVoter, name)
}

// removeVoter asks via to remove name from the voters (Mesh.RemoveVoter)
// and waits for the change to return.
func (c *cluster) removeVoter(via *node, name string) (voterChange, error) {
	return c.changeVoter(via, control.OpRemoveVoter, name)
}

func (c *cluster) changeVoter(via *node, op, name string) (voterChange, error) {
	vc := voterChange{via: via.name, op: op, node: name}
	p := via.proc()
	if p == nil {
		return vc, fmt.Errorf("%s %s through %s: %w", op, name, via.name, errDown)
	}
	res := p.call(control.Request{Op: op, Node: name, TimeoutMS: voterChangeTimeout.Milliseconds()},
		voterChangeTimeout+requestWaitAllowed)
	switch {
	case res.err != nil:
		return vc, fmt.Errorf("%s %s through %s: %w", op, name, via.name, res.err)
	case res.r.Err != "":
		return vc, fmt.Errorf("%s %s through %s: %s: %s", op, name, via.name, res.r.Err, res.r.Msg)
	}
	vc.took, vc.config = time.Duration(res.at-res.callAt), res.r.Config
	return vc, nil
}

// voters asks n for the voter configuration it knows (Mesh.Voters).
func (c *cluster) voters(n *node) (*control.Configuration, error) {
	p := n.proc()
	if p == nil {
		return nil, errDown
	}
	res := p.call(control.Request{Op: control.OpVoters}, 5*time.Second)
	switch {
	case res.err != nil:
		return nil, res.err
	case res.r.Err != "" || res.r.Config == nil:
		return nil, fmt.Errorf("voters: %s %s", res.r.Err, res.r.Msg)
	}
	return res.r.Config, nil
}

// configWant is a voter configuration a scenario waits for: exactly these
// voters, settled (not pending), with at least these names retired.
type configWant struct {
	voters, retired []string
}

func (w configWant) String() string {
	return fmt.Sprintf("voters %v, retired %v, settled", w.voters, w.retired)
}

// holds reports whether cfg is the configuration wanted, and if not, why.
func (w configWant) holds(cfg *control.Configuration) (bool, string) {
	voters := slices.Sorted(slices.Values(cfg.Voters))
	want := slices.Sorted(slices.Values(w.voters))
	switch {
	case !slices.Equal(voters, want):
		return false, fmt.Sprintf("voters %v", cfg.Voters)
	case cfg.Pending:
		return false, fmt.Sprintf("voters %v, pending (previous %v)", cfg.Voters, cfg.Previous)
	}
	for _, r := range w.retired {
		if !slices.Contains(cfg.Retired, r) {
			return false, fmt.Sprintf("voters %v, %s not retired (retired %v)", cfg.Voters, r, cfg.Retired)
		}
	}
	return true, ""
}

// configSettled reports whether every running node knows the wanted
// configuration, the same one (same id), and every running voter of it
// votes live; if not, why. see, when not nil, is shown every configuration
// a node reported.
func (c *cluster) configSettled(want configWant, see func(node string, cfg *control.Configuration)) (bool, string) {
	var id uint64
	var first string
	for _, n := range c.nodes {
		if n.proc() == nil {
			continue
		}
		cfg, err := c.voters(n)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", n.name, err)
		}
		if see != nil {
			see(n.name, cfg)
		}
		if ok, why := want.holds(cfg); !ok {
			return false, fmt.Sprintf("%s knows %s (version %d)", n.name, why, cfg.Version)
		}
		switch {
		case first == "":
			id, first = cfg.ID, n.name
		case cfg.ID != id:
			return false, fmt.Sprintf("%s knows configuration %#x, %s %#x", n.name, cfg.ID, first, id)
		}
		if !slices.Contains(want.voters, n.name) {
			continue
		}
		st, err := c.status(n)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", n.name, err)
		}
		if st.Voting != "live" {
			return false, fmt.Sprintf("voter %s is %q", n.name, st.Voting)
		}
	}
	return true, ""
}

// waitConfig waits until every running node knows the wanted configuration
// and its running voters vote (configSettled), and returns how long that
// took. From then on the cluster counts the wanted voters as its voters
// (waitWhole checks that they vote). see is as for configSettled.
func (c *cluster) waitConfig(want configWant, timeout time.Duration, see func(node string, cfg *control.Configuration)) (time.Duration, error) {
	start := time.Now()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := c.configSettled(want, see)
		if ok {
			for _, n := range c.nodes {
				n.voter = slices.Contains(want.voters, n.name)
			}
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("not every node knows %v after %v: %s", want, timeout, why)
		}
		<-tick.C
	}
}

// describeConfig is a configuration in a line.
func describeConfig(cfg *control.Configuration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version %d, voters %v", cfg.Version, cfg.Voters)
	if cfg.Pending {
		fmt.Fprintf(&b, " (pending; previous %v)", cfg.Previous)
	}
	if len(cfg.Retired) > 0 {
		fmt.Fprintf(&b, ", retired %v", cfg.Retired)
	}
	return b.String()
}
