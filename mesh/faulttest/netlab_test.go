//go:build linux

package faulttest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// netlab is a network of namespaces on one bridge: each node gets its own
// namespace with one veth ("eth0") on the subnet 10.213.0.0/24. The bridge
// has no address, so nothing of the lab is reachable from, or routed
// through, the machine's own namespace: labs of concurrent runs cannot
// collide, and nodes can reach nothing but each other.
type netlab struct {
	t      *testing.T
	id     string // lm<pid>t<n>: prefix of the links
	nsBase string // lockmesh-<pid>-<n>-: prefix of the namespaces
	bridge string
	hosts  map[string]labHost

	mu   sync.Mutex
	cuts map[[2]string]bool // from, to: packets from → to are dropped
}

type labHost struct {
	ns, ip, link string
}

const (
	labSubnet = "10.213.0."
	// deadMAC is the neighbour entry a cut points a peer's address at:
	// the bridge floods the frames, and no interface takes them.
	deadMAC = "02:00:00:00:de:ad"
)

var labCount atomic.Int64

// requireNetns skips t, saying why, when network namespaces cannot be made
// here (not root, no iproute2, or no kernel support).
func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root: the partition and slow-network scenarios did not run (the others do)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no `ip` command (iproute2): the partition and slow-network scenarios did not run (the others do)")
	}
	probe := fmt.Sprintf("lockmesh-%d-probe", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace (%v: %s): the partition and slow-network scenarios did not run", err, strings.TrimSpace(string(out)))
	}
	exec.Command("ip", "netns", "del", probe).Run()
}

// newNetlab builds a namespace per host name, and removes it all when the
// test ends.
func newNetlab(t *testing.T, names []string) *netlab {
	t.Helper()
	requireNetns(t)
	removeLeftovers(t)
	n := labCount.Add(1)
	l := &netlab{
		t:      t,
		id:     fmt.Sprintf("lm%dt%d", os.Getpid(), n),
		nsBase: fmt.Sprintf("lockmesh-%d-%d-", os.Getpid(), n),
		hosts:  make(map[string]labHost),
		cuts:   make(map[[2]string]bool),
	}
	l.bridge = l.id + "b"
	t.Cleanup(l.destroy)
	l.must("link", "add", l.bridge, "type", "bridge")
	l.must("link", "set", l.bridge, "up")
	for i, name := range names {
		l.addHost(name, i+1)
	}
	return l
}

// addHost makes a namespace for name with address 10.213.0.<octet>.
func (l *netlab) addHost(name string, octet int) labHost {
	l.t.Helper()
	i := len(l.hosts) // link names stay within 15 bytes
	h := labHost{ns: l.nsBase + name, ip: labSubnet + strconv.Itoa(octet), link: fmt.Sprintf("%sv%d", l.id, i)}
	peer := fmt.Sprintf("%sp%d", l.id, i)
	l.must("netns", "add", h.ns)
	l.must("link", "add", h.link, "type", "veth", "peer", "name", peer)
	l.must("link", "set", peer, "netns", h.ns)
	l.must("-n", h.ns, "link", "set", peer, "name", "eth0")
	l.must("-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
	l.must("-n", h.ns, "link", "set", "eth0", "up")
	l.must("-n", h.ns, "link", "set", "lo", "up")
	l.must("link", "set", h.link, "master", l.bridge)
	l.must("link", "set", h.link, "up")
	l.hosts[name] = h
	return h
}

func (l *netlab) host(name string) labHost {
	h, ok := l.hosts[name]
	if !ok {
		l.t.Fatalf("no host %q in the lab", name)
	}
	return h
}

// cut drops every packet from each host of from to each host of to,
// silently (one way: the other direction still flows unless cut too).
func (l *netlab) cut(from, to []string) {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range from {
		var cmds []string
		for _, d := range to {
			cmds = append(cmds, fmt.Sprintf("neigh replace %s lladdr %s dev eth0 nud permanent", l.host(d).ip, deadMAC))
			l.cuts[[2]string{f, d}] = true
		}
		l.batch(f, cmds)
	}
}

// split cuts both ways between a and b.
func (l *netlab) split(a, b []string) {
	l.t.Helper()
	l.cut(a, b)
	l.cut(b, a)
}

// heal removes every cut: the hosts resolve each other again by ARP.
func (l *netlab) heal() {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	cmds := make(map[string][]string)
	for c := range l.cuts {
		cmds[c[0]] = append(cmds[c[0]], fmt.Sprintf("neigh del %s dev eth0", l.host(c[1]).ip))
		delete(l.cuts, c)
	}
	for host, list := range cmds {
		l.batch(host, list)
	}
}

// batch runs ip commands in host's namespace, in one process.
func (l *netlab) batch(host string, cmds []string) {
	l.t.Helper()
	cmd := exec.Command("ip", "-n", l.host(host).ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("ip -n %s -batch: %v: %s\n%s", l.host(host).ns, err, strings.TrimSpace(string(out)), strings.Join(cmds, "\n"))
	}
}

// tc runs tc in host's namespace.
func (l *netlab) tc(host string, args ...string) error {
	out, err := exec.Command("ip", append([]string{"netns", "exec", l.host(host).ns, "tc"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tc %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// exec returns the command line that runs argv inside host's namespace.
func (l *netlab) exec(host string, argv ...string) []string {
	return append([]string{"ip", "netns", "exec", l.host(host).ns}, argv...)
}

func (l *netlab) must(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
}

// destroy removes the lab's namespaces (and with them the veths) and its
// bridge. Processes inside must be gone already (the cluster's cleanup
// runs first).
func (l *netlab) destroy() {
	var errs []error
	for _, h := range l.hosts {
		if out, err := exec.Command("ip", "netns", "del", h.ns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", h.ns, err, out))
		}
		// The veth pair goes with the namespace; make sure.
		exec.Command("ip", "link", "del", h.link).Run()
	}
	if out, err := exec.Command("ip", "link", "del", l.bridge).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("ip link del %s: %v: %s", l.bridge, err, out))
	}
	if err := errors.Join(errs...); err != nil {
		l.t.Errorf("removing the network lab: %v", err)
	}
}

var (
	leftoverNS   = regexp.MustCompile(`^lockmesh-(\d+)-`)
	leftoverLink = regexp.MustCompile(`^lm(\d+)t\d+[bvp]\d*$`)
)

// removeLeftovers deletes namespaces and links of earlier runs whose
// process is gone (a run killed before its cleanup).
func removeLeftovers(t *testing.T) {
	t.Helper()
	gone := func(pid string) bool {
		_, err := os.Stat("/proc/" + pid)
		return pid != strconv.Itoa(os.Getpid()) && errors.Is(err, os.ErrNotExist)
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			if m := leftoverNS.FindStringSubmatch(f[0]); m != nil && gone(m[1]) {
				t.Logf("removing namespace %s, left by an earlier run", f[0])
				exec.Command("ip", "netns", "del", f[0]).Run()
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if m := leftoverLink.FindStringSubmatch(name); m != nil && gone(m[1]) {
				t.Logf("removing link %s, left by an earlier run", name)
				exec.Command("ip", "link", "del", name).Run()
			}
		}
	}
}
