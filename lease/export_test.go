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

// Held is how many units l holds for key under policy: its current lease's and the one taken ahead.
func Held(l *Leaser, policy, key string) int64 {
	t := (*l.tables.Load())[policy]
	if t == nil {
		return 0
	}
	s := t.keys.load(key)
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	if ls := s.cur.Load(); ls != nil && !ls.ended {
		n += ls.units.Load()
	}
	if s.next != nil {
		n += s.next.start
	}
	return n
}
