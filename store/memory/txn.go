package memory

import (
	"cmp"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
)

// step is one key of one part in a multi-key step.
type step struct {
	part part
	h    uint64
	key  string
	cost int64
}

// atomically decides steps as one: it locks every slot involved, decides each step in order
// against the states as the earlier steps left them, and if any step is denied puts every state
// back. Decision i goes to out[i].
//
// Slots are locked in one global order (keyspace, hash, key), so two multi-key steps never wait on
// each other; steps of one key in one keyspace share its slot, each deciding it with its own part's
// numbers (policies of one name whose limits differ). A slot that cannot be locked without blocking
// (a rebuild, a key to create) makes it let go of everything, prepare that slot, and start over. It returns ErrFull, having changed no state,
// when the cap refuses a key.
func atomically(now int64, steps []step, out []sluice.Decision) error {
	order := make([]int, len(steps))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := &steps[a], &steps[b]
		return cmp.Or(cmp.Compare(x.part.id(), y.part.id()), cmp.Compare(x.h, y.h), strings.Compare(x.key, y.key))
	})
	holds := make([]held, len(steps)) // holds[i] is the slot of step i; repeated steps share one
	var locked []held
	for {
		clear(holds)
		locked = locked[:0]
		var stuck *step
		for k, i := range order {
			if k > 0 {
				if p := &steps[order[k-1]]; p.part.id() == steps[i].part.id() && p.h == steps[i].h && p.key == steps[i].key {
					holds[i] = holds[order[k-1]]
					continue
				}
			}
			hd, ok := steps[i].part.hold(steps[i].h, steps[i].key)
			if !ok {
				stuck = &steps[i]
				break
			}
			holds[i], locked = hd, append(locked, hd)
		}
		if stuck != nil {
			for _, hd := range locked {
				hd.unlock()
			}
			if !stuck.part.prepare(stuck.h, stuck.key) {
				return ErrFull
			}
			continue
		}
		break
	}
	allowed := true
	for i, st := range steps {
		out[i] = holds[i].check(st.part, now, st.cost)
		allowed = allowed && out[i].Allowed
	}
	for _, hd := range locked {
		if !allowed {
			hd.restore()
		}
		hd.unlock()
	}
	return nil
}
