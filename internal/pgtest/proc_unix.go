//go:build unix

package pgtest

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// runAs returns how to start initdb and postgres: as ourselves, or, when we
// are root, as serverUser, owning dir. It also sets the parent-death signal
// where the system has one, so that a test binary that dies does not leave
// a server behind.
func runAs(dir string) (*syscall.SysProcAttr, error) {
	attr := &syscall.SysProcAttr{}
	setParentDeathSignal(attr)
	if os.Geteuid() != 0 {
		return attr, nil
	}
	u, err := serverUser()
	if err != nil {
		return nil, err
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgtest: user %s has uid %q, gid %q", u.Username, u.Uid, u.Gid)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return attr, nil
}
