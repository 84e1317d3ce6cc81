package workload

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SelfCPU is the CPU time (user + system) this process has used, from
// getrusage(RUSAGE_SELF): every goroutine, the runtime and the GC included.
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Self is a CPUSource for this process.
func Self(name string) CPUSource { return CPUSource{Name: name, Read: SelfCPU} }

// Proc is a CPUSource for another process, read from /proc/<pid>/stat.
func Proc(name string, pid int) CPUSource {
	return CPUSource{Name: name, Read: func() (time.Duration, error) { return ProcCPU(pid) }}
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every
// Linux architecture Go supports (the kernel fixes it for user space).
const clockTicks = 100

// ProcCPU is the CPU time (utime + stime) of process pid, from
// /proc/<pid>/stat: 10 ms resolution, so runs should last seconds.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}
