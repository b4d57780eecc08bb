//go:build unix

package topkeys

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used, all threads: on a machine others share, a
// benchmark's CPU time per op says what it costs better than its wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
