// Package bearer reads sluice serve's token file and answers which scope a bearer token holds.
//
// The file holds one token a line. A bare line "TOKEN" gives every right (Admin), as before scopes
// existed, so that an old file keeps working; "check:TOKEN" and "admin:TOKEN" give a scope. Blank
// lines and lines starting with "#" are ignored.
package bearer

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// Scope is what a token may do. Scopes are ordered: Admin includes Check.
type Scope uint8

const (
	// None is no right: an unknown token.
	None Scope = iota
	// Check is the right to check, peek, forecast, pass the gate, hold concurrency slots, record
	// and read usage and streams, and call Envoy's rate-limit API.
	Check
	// Admin is every right, with reset, refund, settle and anything else that changes or wipes
	// state.
	Admin
)

// String returns the scope's name in the token file.
func (s Scope) String() string {
	switch s {
	case Check:
		return "check"
	case Admin:
		return "admin"
	}
	return "none"
}

// Allows reports whether a token of scope s may do what needs scope need.
func (s Scope) Allows(need Scope) bool { return need != None && s >= need }

type entry struct {
	digest [sha256.Size]byte
	scope  Scope
}

// Set is a parsed token file. It is immutable: a reload builds a new Set.
type Set struct {
	entries []entry
}

// Len returns how many tokens s holds.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.entries)
}

// Lookup returns token's scope, None if s does not hold it. It compares SHA-256 digests, all of
// them, in constant time: the time taken says nothing of the token's length or of which entry
// was close.
func (s *Set) Lookup(token string) Scope {
	if s == nil || token == "" {
		return None
	}
	got := sha256.Sum256([]byte(token))
	scope := 0
	for i := range s.entries {
		eq := subtle.ConstantTimeCompare(got[:], s.entries[i].digest[:])
		scope |= subtle.ConstantTimeSelect(eq, int(s.entries[i].scope), 0)
	}
	return Scope(scope)
}

// Of returns a Set giving every token Admin, as bare lines do; empty tokens are left out.
func Of(tokens ...string) *Set {
	s := &Set{}
	for _, t := range tokens {
		if t != "" {
			s.entries = append(s.entries, entry{sha256.Sum256([]byte(t)), Admin})
		}
	}
	return s
}

// ReadFile reads and parses the token file at path.
func ReadFile(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bearer: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return s, nil
}

// ErrNoToken is Parse's error for a file with no token: likely one caught empty or half-written.
var ErrNoToken = errors.New("bearer: the token file holds no token")

// Parse parses a token file. A malformed line is an error naming its number (from 1): an
// unknown scope, an empty token, whitespace or a control character inside a token, or a token
// given two scopes. A file with no token is ErrNoToken.
func Parse(data []byte) (*Set, error) {
	s := &Set{}
	seen := map[string]Scope{}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line) // also drops a CRLF file's "\r"
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		token, scope := line, Admin
		if name, rest, ok := strings.Cut(line, ":"); ok {
			switch name {
			case "check":
				token, scope = rest, Check
			case "admin":
				token, scope = rest, Admin
			default:
				// The part before ':' may be a secret (a bare token holding ':'): shown only
				// when it looks like a mistyped scope name.
				shown := "(not shown)"
				if len(name) <= 16 && strings.IndexFunc(name, func(r rune) bool { return !unicode.IsLetter(r) }) < 0 {
					shown = strconv.Quote(name)
				}
				return nil, fmt.Errorf("bearer: line %d: unknown scope %s: want check or admin, or a bare token for every right", n+1, shown)
			}
		}
		if token == "" {
			return nil, fmt.Errorf("bearer: line %d: empty token", n+1)
		}
		if i := strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
			r, _ := utf8.DecodeRuneInString(token[i:])
			return nil, fmt.Errorf("bearer: line %d: the token holds %q at byte %d: tokens hold no whitespace or control characters", n+1, r, i)
		}
		if prev, ok := seen[token]; ok {
			if prev != scope {
				return nil, fmt.Errorf("bearer: line %d: the token is given two scopes, %s and %s", n+1, prev, scope)
			}
			continue
		}
		seen[token] = scope
		s.entries = append(s.entries, entry{sha256.Sum256([]byte(token)), scope})
	}
	if len(s.entries) == 0 {
		return nil, ErrNoToken
	}
	return s, nil
}

// Live holds the Set in force, swapped whole on reload so that a request sees the old set or the
// new one, never a mix. A nil *Live, or one holding no Set, means auth is off.
type Live struct {
	cur atomic.Pointer[Set]
}

// NewLive returns a Live holding s; nil turns auth off.
func NewLive(s *Set) *Live {
	l := &Live{}
	l.cur.Store(s)
	return l
}

// Load returns the Set in force, nil if none.
func (l *Live) Load() *Set {
	if l == nil {
		return nil
	}
	return l.cur.Load()
}

// Store puts s in force.
func (l *Live) Store(s *Set) { l.cur.Store(s) }

// Decision is the answer to a request: its token's standing against the scope it needs.
type Decision uint8

const (
	// Allowed lets the request through; auth may be off.
	Allowed Decision = iota
	// Unauthenticated is no token, or one not in the set: 401, UNAUTHENTICATED.
	Unauthenticated
	// Forbidden is a known token without the scope needed: 403, PERMISSION_DENIED.
	Forbidden
)

// Authorize decides a request carrying token (empty if none) that needs scope need. With no Set
// in force, auth is off and every request is Allowed; a Set holding no token allows nothing.
func (l *Live) Authorize(token string, need Scope) Decision {
	s := l.Load()
	if s == nil {
		return Allowed
	}
	got := s.Lookup(token)
	switch {
	case got == None:
		return Unauthenticated
	case !got.Allows(need):
		return Forbidden
	}
	return Allowed
}

type sessionKey struct{}

// Session is what a front end learned of a request's token, for handlers behind it that adapt
// to the caller (the operator console shows actions to admins only).
type Session struct {
	Auth  bool  // the server asks for tokens
	Scope Scope // the scope of the request's token; Admin when Auth is false
}

// WithSession returns ctx carrying s.
func WithSession(ctx context.Context, s Session) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

// SessionOf returns the Session ctx carries; a ctx with none is of a server without tokens.
func SessionOf(ctx context.Context) Session {
	if s, ok := ctx.Value(sessionKey{}).(Session); ok {
		return s
	}
	return Session{Auth: false, Scope: Admin}
}
