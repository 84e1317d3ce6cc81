//go:build !unix

package main

import (
	"errors"
	"os"
)

var errNoStop = errors.New("freezing a process (SIGSTOP) needs a unix system")

func freeze(*os.Process) error { return errNoStop }
func thaw(*os.Process) error   { return errNoStop }
