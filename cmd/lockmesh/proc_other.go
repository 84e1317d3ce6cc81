//go:build !unix

package main

import (
	"errors"
	"os"
	"syscall"
)

// lock needs process groups and signals: Unix only.

var forwarded = []os.Signal{os.Interrupt}

func checkPlatform() error { return errors.New("lockmesh lock needs a Unix system") }

func childAttr() *syscall.SysProcAttr                { return nil }
func signalGroup(int, os.Signal)                     {}
func signalNumber(os.Signal) int                     { return 0 }
func exitStatus(ps *os.ProcessState) int             { return ps.ExitCode() }
func fileOwner(string) (int, bool)                   { return 0, false }
func withUmask(_ os.FileMode, fn func() error) error { return fn() }
