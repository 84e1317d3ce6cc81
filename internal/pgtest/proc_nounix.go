//go:build !unix

package pgtest

import (
	"fmt"
	"syscall"
)

// runAs fails: the tests start PostgreSQL only on unix systems, whose
// sockets they connect through.
func runAs(string) (*syscall.SysProcAttr, error) {
	return nil, fmt.Errorf("%w on this system: the tests use a unix socket", ErrNotInstalled)
}
