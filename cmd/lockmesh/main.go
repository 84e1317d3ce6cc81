package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// commands returns every subcommand, in the order help lists them.
func commands() []*command {
	return []*command{
		agentCommand(),
		lockCommand(),
		electCommand(),
		holderCommand(),
		locksCommand(),
		statusCommand(),
		votersCommand(),
	}
}

// run runs the subcommand args name and returns the exit status.
func run(args []string) int {
	if len(args) == 0 {
		help(os.Stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c := find(args[1]); c != nil {
				c.usage(os.Stdout)
				return exitOK
			}
		}
		help(os.Stdout)
		return exitOK
	}
	c := find(args[0])
	if c == nil {
		fmt.Fprintf(os.Stderr, "lockmesh: unknown command %q\n\n", args[0])
		help(os.Stderr)
		return exitUsage
	}
	rest, err := c.parse(args[1:])
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if err == nil {
		err = c.run(rest)
	}
	return exitWith(err)
}

func find(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

func help(w io.Writer) {
	fmt.Fprintf(w, "lockmesh: cluster-wide locks with no lock server\n\nusage: lockmesh COMMAND [flags] [args]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.short)
	}
	fmt.Fprintf(w, "\n\"lockmesh COMMAND -h\" describes a command, its flags and exit statuses.\n")
}

// defaultSocket is where the agent listens and clients dial unless told
// otherwise: $XDG_RUNTIME_DIR/lockmesh.sock (a directory only its user can
// enter), else lockmesh-UID.sock in the temporary directory.
func defaultSocket() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "lockmesh.sock")
	}
	return filepath.Join(os.TempDir(), "lockmesh-"+strconv.Itoa(os.Getuid())+".sock")
}
