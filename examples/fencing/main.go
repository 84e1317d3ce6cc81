// Command fencing shows fencing tokens at work across OS processes:
//
//	go run ./examples/fencing
//
// It starts three copies of itself, a, b and c. Each embeds a lockmesh voter
// node (the three find each other over loopback gossip) and, again and
// again, takes the lock "counter" and increments a counter in a SQLite file
// they share: it reads the counter and writes counter+1 in one transaction
// fenced by the lease's token (package sqlfence), and logs (token, value)
// in the same transaction.
//
// Meanwhile this parent process freezes a holder with SIGSTOP right after
// it took the lock and before it writes, waits until another process has
// taken the lock over (which the voters allow only once the frozen lease has
// expired) and written, then resumes it with SIGCONT. The resumed process
// writes with its old token, as a process back from a long GC pause would,
// and the fence refuses it. At the end the parent checks that no update was
// lost (the counter equals the increments the processes saw commit) and that
// no stale write was accepted (the logged tokens never go down), and prints
// the counts. It exits 0 when all held, 1 otherwise.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == childArg {
		os.Exit(runChild(os.Args[2:], os.Stdin, os.Stdout))
	}
	duration := flag.Duration("duration", 10*time.Second, "how long the processes increment the counter")
	pauses := flag.Int("pauses", 3, "how many holders to freeze past their lease (SIGSTOP, then SIGCONT)")
	dir := flag.String("dir", "", "directory for the SQLite file and the processes' logs (default: a new temporary one, removed at the end)")
	verbose := flag.Bool("v", false, "print every increment, and the nodes' logs on stderr")
	flag.Parse()
	if *duration <= 0 || *pauses < 0 {
		fmt.Fprintln(os.Stderr, "fencing: -duration must be positive and -pauses at least 0")
		os.Exit(2)
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "lockmesh-fencing-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "fencing:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencing:", err)
		os.Exit(1)
	}
	cfg := demoConfig{
		Duration: *duration,
		Pauses:   *pauses,
		Dir:      *dir,
		Verbose:  *verbose,
		Out:      os.Stdout,
		Command: func(args ...string) *exec.Cmd {
			return exec.Command(self, append([]string{childArg}, args...)...)
		},
	}
	if *verbose {
		cfg.Stderr = os.Stderr
	}
	res, err := runDemo(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	fmt.Println(res.summary())
}

// childArg, first on a child's command line, makes the program a child.
const childArg = "-child"
