package main

import (
	"errors"
	"fmt"
	"os"
)

// Exit statuses. lock and elect exit with CMD's status when CMD ran; these
// codes say what happened otherwise. They sit above the statuses programs
// commonly use and below the shell's 126–255 (not executable, not found,
// killed by a signal), following sysexits.h where a meaning matches.
const (
	exitOK          = 0
	exitError       = 1  // a request the mesh refused (a voter change not allowed, ...)
	exitUsage       = 64 // bad flags or arguments, an -n the key's other users do not give
	exitUnsupported = 65 // the agent, or its mesh mid-upgrade, cannot do this (elect, locks, -n)
	exitUnavailable = 69 // the agent could not be reached, or no majority of the voters answered
	exitTimeout     = 75 // lock, elect: not acquired within -timeout (someone else held it)
	exitLost        = 76 // lock: the lease was lost while CMD ran, and CMD was signalled; elect: leadership lost
	exitCannotRun   = 126
	exitNotFound    = 127
	exitSignal      = 128 // + the signal's number: interrupted before CMD started, or CMD killed by it
)

// exitCodeOf maps an agent error code to an exit status.
func exitCodeOf(code string) int {
	switch code {
	case codeUsage, codeVersion, codeInvalidKey, codeInvalidOpt, codeNotHeld:
		return exitUsage
	case codeUnsupported:
		return exitUnsupported
	case codeNoQuorum, codeNoVoters, codeClosed, codeBusy:
		return exitUnavailable
	case codeTimeout:
		return exitTimeout
	case codeLost:
		return exitLost
	}
	return exitError
}

// exitErr is an error that ends the command with a given status.
type exitErr struct {
	code int
	err  error
}

func (e *exitErr) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitErr) Unwrap() error { return e.err }

// fail returns an error that exits with code.
func fail(code int, format string, args ...any) error {
	return &exitErr{code: code, err: fmt.Errorf(format, args...)}
}

// failAPI returns an error that exits with the status of an agent error,
// or exitUnavailable for one of the connection.
func failAPI(what string, err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return &exitErr{code: exitCodeOf(ae.Code), err: fmt.Errorf("%s: %w", what, err)}
	}
	return &exitErr{code: exitUnavailable, err: fmt.Errorf("%s: %w", what, err)}
}

// exitWith prints err (if any) on stderr and returns its exit status.
func exitWith(err error) int {
	if err == nil {
		return exitOK
	}
	var e *exitErr
	if errors.As(err, &e) {
		if e.err != nil {
			fmt.Fprintf(os.Stderr, "lockmesh: %v\n", err)
		}
		return e.code
	}
	fmt.Fprintf(os.Stderr, "lockmesh: %v\n", err)
	return exitError
}

// quietExit exits with code and prints nothing (CMD's own status).
func quietExit(code int) error {
	if code == exitOK {
		return nil
	}
	return &exitErr{code: code}
}
