package lease

// KeysHeld is how many keys of policy l keeps a slot for, for tests.
func KeysHeld(l *Leaser, policy string) int {
	t := (*l.tables.Load())[policy]
	if t == nil {
		return 0
	}
	n := 0
	t.keys.each(func(*slot) { n++ })
	return n
}

// Settle waits until the background goroutine has handled every lease asked for ahead so far.
func Settle(l *Leaser) {
	done := make(chan struct{})
	select {
	case l.renewals <- renewal{done: done}:
		<-done
	case <-l.done:
	}
}
