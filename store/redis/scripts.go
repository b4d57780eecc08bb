package redisstore

import (
	"embed"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
)

// The store's Lua is in lua/*.lua, the one definition of its scripts and of the state they keep,
// which another client may run too (docs/redis.md says how). This file only assembles them: a
// script per operation, shape and set of strategies, holding only what the call uses, since Redis
// runs a script's whole body, defining each function again, on every call. Each is assembled and
// hashed once, on first use.
//
// A file is fragments. Its lines before the first line starting with "--@" document it; "--@"
// alone starts the fragment named after the file ("clock"), "--@ name" the fragment file.name
// ("gcra.check"); a fragment runs to the next such line or the file's end. A line holding only
// "--> name" is replaced by fragment name (pasted inline where a call would cost a hot loop), and
// "*." in name stands for the batch script's strategy ("*.batch-read" in gcra.lua's batch is
// "gcra.batch-read").

//go:embed lua/*.lua
var luaFiles embed.FS

// fragments holds every fragment of lua/*.lua by name.
var fragments = parseFragments()

func parseFragments() map[string]string {
	entries, err := luaFiles.ReadDir("lua")
	if err != nil {
		panic(err)
	}
	out := make(map[string]string)
	for _, e := range entries {
		file := strings.TrimSuffix(e.Name(), ".lua")
		text, err := luaFiles.ReadFile("lua/" + e.Name())
		if err != nil {
			panic(err)
		}
		name := ""
		for line := range strings.Lines(string(text)) {
			if rest, ok := strings.CutPrefix(line, "--@"); ok {
				name = file
				if rest = strings.TrimSpace(rest); rest != "" {
					name += "." + rest
				}
				if _, dup := out[name]; dup {
					panic("redisstore: lua/" + e.Name() + ": fragment " + name + " twice")
				}
				out[name] = ""
				continue
			}
			if name != "" {
				out[name] += line
			}
		}
	}
	return out
}

// assemble returns the fragments named, in order, with each "--> name" line replaced by that
// fragment, indented as the line is; star is what "*" stands for.
func assemble(star string, names ...string) string {
	var b strings.Builder
	for _, name := range names {
		paste(&b, star, name, "", 0)
	}
	return b.String()
}

func paste(b *strings.Builder, star, name, indent string, depth int) {
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name = star + "." + rest
	}
	text, ok := fragments[name]
	if !ok || depth > 8 {
		panic("redisstore: Lua fragment " + name + " is missing or nests too deep")
	}
	for line := range strings.Lines(text) {
		trimmed := strings.TrimLeft(line, " ")
		if inner, ok := strings.CutPrefix(strings.TrimSpace(trimmed), "--> "); ok {
			paste(b, star, strings.TrimSpace(inner), indent+line[:len(line)-len(trimmed)], depth+1)
			continue
		}
		if line != "\n" {
			b.WriteString(indent)
		}
		b.WriteString(line)
	}
}

// op is an operation of the scripts.
type op int

const (
	opCheck op = iota
	opPeek
	opForecast
	opRefund
	opDebit
	numOps
)

// opFiles are the operations' files: each holds its body, and some the helpers its strategies'
// fragments use (file.helpers).
var opFiles = [numOps]string{"check", "peek", "forecast", "refund", "debit"}

// kinds are the strategies' letters, in the order of their bits in a kind set, and kindFiles
// their files.
const kinds = "gtfsl"

var kindFiles = [len(kinds)]string{"gcra", "tokenbucket", "fixedwindow", "slidingwindow", "slidinglog"}

// Kind sets whose strategies' states need near.lua's functions or lists.lua.
const (
	nearKinds     uint8 = 1<<1 | 1<<2 // token bucket, fixed window
	listKinds     uint8 = 1<<3 | 1<<4 // sliding window, sliding log
	calendarKinds uint8 = 1 << 2      // a calendar fixed window has no batch script
)

// shape is which of an operation's scripts runs a call.
type shape uint8

const (
	shapeGeneral       shape = iota // any steps (steps.lua)
	shapeOne                        // a check of one step (check.lua's one)
	shapeBatch                      // a batch of checks (batch.lua) whose keys may repeat
	shapeBatchDistinct              // a batch of checks whose keys are all different
	numShapes
)

// scriptKey names a script: its operation, strategies (bit i: kinds[i]) and shape.
type scriptKey struct {
	op    op
	set   uint8
	shape shape
}

// batchable[set] is whether set is one strategy with a batch script (its file has a fragment
// batch).
var batchable = func() (out [1 << len(kinds)]bool) {
	for i, file := range kindFiles {
		_, out[1<<i] = fragments[file+".batch"]
	}
	return out
}()

// sendable reports whether a call can run k's script: whether plan can choose it.
func (k scriptKey) sendable() bool {
	if k.op < 0 || k.op >= numOps || k.set == 0 || int(k.set) >= 1<<len(kinds) {
		return false
	}
	switch k.shape {
	case shapeGeneral:
		return true
	case shapeOne: // a one-step check of a batchable set takes the batch unless it is a calendar window
		return k.op == opCheck && k.set&(k.set-1) == 0 && (!batchable[k.set] || k.set&calendarKinds != 0)
	case shapeBatch, shapeBatchDistinct:
		return k.op == opCheck && batchable[k.set]
	}
	return false
}

// recipe lists the fragments of k's script, in order, and what "*" stands for in them.
func (k scriptKey) recipe() (star string, names []string) {
	names = []string{"clock", "header"}
	if k.shape == shapeBatch || k.shape == shapeBatchDistinct {
		body := "batch.repeats"
		if k.shape == shapeBatchDistinct {
			body = "batch.distinct"
		}
		for i := range kindFiles {
			if k.set == 1<<i {
				star = kindFiles[i]
			}
		}
		return star, append(names, "mget", "batch", "*.batch", body, "batch.reply")
	}
	names = append(names, "strategy")
	if k.set&nearKinds != 0 {
		names = append(names, "near.functions")
	}
	if k.set&listKinds != 0 {
		names = append(names, "lists")
	}
	opFile := opFiles[k.op]
	if _, ok := fragments[opFile+".helpers"]; ok {
		names = append(names, opFile+".helpers")
	}
	for i, file := range kindFiles {
		if k.set&(1<<i) != 0 {
			names = append(names, file, file+"."+opFile)
		}
	}
	if k.shape == shapeOne {
		return "", append(names, "check.one")
	}
	return "", append(names, "mget", "steps", opFile)
}

// scripts holds every script, made on first use.
var scripts [numOps][1 << len(kinds)][numShapes]struct {
	once sync.Once
	s    *script
}

// script returns k's script.
func (k scriptKey) script() *script {
	e := &scripts[k.op][k.set][k.shape]
	e.once.Do(func() {
		star, names := k.recipe()
		e.s = newScript(assemble(star, names...))
	})
	return e.s
}

// fixedScripts are the scripts of one assembly each (the leases'), by name.
var fixedScripts = map[string]*script{}

func fixedScript(name string, names ...string) *script {
	sc := newScript(assemble("", names...))
	fixedScripts[name] = sc
	return sc
}

// scriptKey returns the key of the script that runs c, and c.stepArgs(). A batch (batch.lua) is a
// check whose steps use one GCRA, token bucket or fixed window (not a calendar one) limit and
// cost, each its own group.
func (c *call) scriptKey() (scriptKey, []string) {
	steps := c.stepArgs()
	k := scriptKey{op: c.op, set: c.set, shape: shapeGeneral}
	switch {
	case c.op == opCheck && c.perGroup == 1 && len(steps) == 2 && batchable[c.set] &&
		!(c.set&calendarKinds != 0 && c.defs[2] == "0"): // windowMs 0: a calendar window
		k.shape = shapeBatch
		if distinct(c.keys) {
			k.shape = shapeBatchDistinct
		}
	case c.op == opCheck && len(c.keys) == 1:
		k.shape = shapeOne
	}
	return k, steps
}

// plan returns the script that runs c and its arguments: for a batch now, the slack, the instant
// to give up, the limit's first three parameters and the cost; for any other call, as
// lua/header.lua and lua/steps.lua describe.
func (c *call) plan() (*script, []string) {
	k, steps := c.scriptKey()
	sc := k.script()
	if k.shape == shapeBatch || k.shape == shapeBatchDistinct {
		return sc, []string{c.head[0], c.head[1], c.head[2], c.defs[1], c.defs[2], c.defs[3], c.steps[1]}
	}
	argv := make([]string, 0, len(c.head)+1+len(c.defs)+len(steps))
	argv = append(append(argv, c.head...), strconv.Itoa(len(c.limits)))
	return sc, append(append(argv, c.defs...), steps...)
}

// seed hashes keys for distinct.
var seed = maphash.MakeSeed()

// distinct reports whether keys holds no key twice. Two keys whose hashes collide count as the
// same, which costs a batch only its faster script.
func distinct(keys []string) bool {
	if len(keys) > 64 {
		seen := make(map[string]struct{}, len(keys))
		for _, k := range keys {
			if _, ok := seen[k]; ok {
				return false
			}
			seen[k] = struct{}{}
		}
		return true
	}
	var table [128]uint64 // open addressing; 0 is an empty slot
	for _, k := range keys {
		h := maphash.String(seed, k) | 1
		for i := h % 128; ; i = (i + 1) % 128 {
			if table[i] == 0 {
				table[i] = h
				break
			}
			if table[i] == h {
				return false
			}
		}
	}
	return true
}
