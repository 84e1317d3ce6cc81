package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// envName is the environment variable that sets flag name when the
// command line does not: LOCKMESH_ and the name in upper case, dashes as
// underscores (-tls-cert: LOCKMESH_TLS_CERT).
func envName(name string) string {
	return "LOCKMESH_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// command is one subcommand: its flags, usage text and body.
type command struct {
	name  string
	args  string // the arguments after the flags, for the usage line
	short string // one line, for lockmesh's own help
	long  string // what it does, printed under the usage line
	// env lists the flags that the environment may set (see envName).
	env []string
	// interspersed lets flags come after arguments too (not for lock,
	// whose arguments after KEY are CMD's); "--" ends the flags.
	interspersed bool
	fs           *flag.FlagSet
	run          func(args []string) error
}

func newCommand(name, args, short, long string) *command {
	c := &command{name: name, args: args, short: short, long: long, fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(io.Discard) // parse errors are reported once, by parse
	return c
}

// usage prints the command's help on w.
func (c *command) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: lockmesh %s [flags] %s\n\n%s\n", c.name, c.args, strings.TrimSpace(c.long))
	fmt.Fprintf(w, "\nflags:\n")
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
	if len(c.env) > 0 {
		fmt.Fprintf(w, "\nenvironment (a flag on the command line wins):\n")
		for _, n := range c.env {
			fmt.Fprintf(w, "  %-26s -%s\n", envName(n), n)
		}
	}
}

// parse parses args, then fills the flags listed in c.env that the command
// line left unset from the environment. -h prints the help and returns
// errHelp; any other problem is a usage error.
func (c *command) parse(args []string) ([]string, error) {
	rest, err := c.parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		c.usage(os.Stdout)
		return nil, errHelp
	}
	if err != nil {
		return nil, c.usageError("%v", err)
	}
	set := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, n := range c.env {
		v, ok := os.LookupEnv(envName(n))
		if !ok || set[n] {
			continue
		}
		if err := c.fs.Set(n, v); err != nil {
			return nil, c.usageError("%s=%q: %v", envName(n), v, err)
		}
	}
	return rest, nil
}

// parseFlags parses the flags and returns the other arguments. Unless
// interspersed, flags end at the first argument that is not one.
func (c *command) parseFlags(args []string) ([]string, error) {
	if !c.interspersed {
		err := c.fs.Parse(args)
		return c.fs.Args(), err
	}
	var after []string // the arguments after "--": never flags
	for i, a := range args {
		if a == "--" {
			args, after = args[:i], args[i+1:]
			break
		}
	}
	var rest []string
	for {
		if err := c.fs.Parse(args); err != nil {
			return nil, err
		}
		args = c.fs.Args()
		if len(args) == 0 {
			return append(rest, after...), nil
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

// usageError is a usage error of this command, with a hint to its help.
func (c *command) usageError(format string, args ...any) error {
	return fail(exitUsage, "%s: %s (see lockmesh %s -h)", c.name, fmt.Sprintf(format, args...), c.name)
}

// errHelp: -h was given and the help printed; exit 0.
var errHelp = errors.New("help printed")

// socketFlag adds -socket, the agent's API socket, to a client command.
func (c *command) socketFlag() *string {
	c.env = append(c.env, "socket")
	return c.fs.String("socket", defaultSocket(), "the local agent's API socket")
}

// list splits a comma-separated flag, dropping blanks.
func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
