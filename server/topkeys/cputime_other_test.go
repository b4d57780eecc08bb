//go:build !unix

package topkeys

import "time"

func cpuTime() time.Duration { return 0 }
