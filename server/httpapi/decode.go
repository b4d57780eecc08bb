package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
)

// MaxBatch is the most keys of a check-many, or items of a check-all, that one request may carry.
const MaxBatch = 1000

// field is one member a request object may carry.
type field struct {
	name     string
	required bool
	want     string // the JSON type, for errors: "a string", "an integer"
	dst      any    // where json.Unmarshal puts the value
}

// decodeObject reads data as one JSON object whose members are fields, strictly: member names
// match exactly (encoding/json alone would take "POLICY" for "policy"), no member is unknown,
// repeated or null, and nothing follows the object. path prefixes the names in errors ("items[3].").
func decodeObject(data []byte, path string, fields []field) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return badJSON(path, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return invalidf("%smust be a JSON object", orBody(path))
	}
	seen := make([]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return badJSON(path, err)
		}
		name, _ := tok.(string) // an object key is always a string
		i := indexOf(fields, name)
		switch {
		case i < 0:
			return invalidf("unknown field %q", path+name)
		case seen[i]:
			return invalidf("field %q appears twice", path+name)
		}
		seen[i] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return badJSON(path, err)
		}
		if string(raw) == "null" {
			return invalidf("%s%s: must be %s, not null", path, name, fields[i].want)
		}
		// encoding/json turns invalid UTF-8 and lone surrogates into U+FFFD, so that distinct
		// keys would share a bucket: refuse them instead. Nested objects check their own members.
		if _, nested := fields[i].dst.(*[]json.RawMessage); !nested && !validText(raw) {
			return invalidf("%s%s: holds invalid UTF-8 or an unpaired surrogate escape", path, name)
		}
		if err := json.Unmarshal(raw, fields[i].dst); err != nil {
			return invalidf("%s%s: must be %s", path, name, fields[i].want)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return badJSON(path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalidf("%sunexpected data after the JSON object", orBody(path))
	}
	for i, f := range fields {
		if f.required && !seen[i] {
			return invalidf("%s%s: is missing", path, f.name)
		}
	}
	return nil
}

// validText reports whether the JSON text raw is valid UTF-8 whose \u escapes pair every
// surrogate (U+D800–U+DFFF), so that its strings decode without replacement characters.
func validText(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(raw):
			i++
			if raw[i] != 'u' {
				continue
			}
			r, ok := hex4(raw, i+1)
			if !ok {
				return false // encoding/json refuses it anyway
			}
			i += 4
			switch {
			case r >= 0xdc00 && r <= 0xdfff: // a low half with no high half before it
				return false
			case r >= 0xd800 && r <= 0xdbff: // a high half must be followed by a low half
				if i+2 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
					return false
				}
				lo, ok := hex4(raw, i+3)
				if !ok || lo < 0xdc00 || lo > 0xdfff {
					return false
				}
				i += 6
			}
		}
	}
	return true
}

// hex4 reads the four hex digits at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func indexOf(fields []field, name string) int {
	for i, f := range fields {
		if f.name == name {
			return i
		}
	}
	return -1
}

func badJSON(path string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return invalidf("%sis not complete JSON", orBody(path))
	}
	return invalidf("%sis not valid JSON: %v", orBody(path), err)
}

func orBody(path string) string {
	if path == "" {
		return "body: "
	}
	return path[:len(path)-1] + ": " // "items[3]." → "items[3]: "
}

// checkRequest is the body of /v1/check, /v1/peek, /v1/forecast, /v1/refund and /v1/reset.
type checkRequest struct {
	Policy string
	Key    string
	Cost   int64 // 1 unless given, and for a given 0 (wireCost)
	Now    int64 // epoch ms; 0 for the server's clock
}

// decodeCheck reads a checkRequest. withCost is false for operations that take no cost (peek,
// reset), withNow false for reset, which does not depend on time.
func decodeCheck(data []byte, withCost, withNow bool) (checkRequest, error) {
	req := checkRequest{Cost: 1}
	err := decodeObject(data, "", req.fields(withCost, withNow))
	req.Cost = wireCost(req.Cost)
	return req, err
}

// fields are the members of a checkRequest's body, into req.
func (req *checkRequest) fields(withCost, withNow bool) []field {
	fields := []field{
		{"policy", true, "a string", &req.Policy},
		{"key", true, "a string", &req.Key},
	}
	if withCost {
		fields = append(fields, field{"cost", false, "an integer", &req.Cost})
	}
	if withNow {
		fields = append(fields, field{"now", false, "an integer (epoch ms)", &req.Now})
	}
	return fields
}

// actionRequest is the body of /v1/reset and /v1/refund: a checkRequest and why, for the log.
type actionRequest struct {
	checkRequest
	Reason string
}

// decodeAction reads an actionRequest: reset takes neither cost nor now (withCost false).
func decodeAction(data []byte, withCost bool) (actionRequest, error) {
	req := actionRequest{checkRequest: checkRequest{Cost: 1}}
	fields := append(req.fields(withCost, withCost), field{"reason", false, "a string", &req.Reason})
	if err := decodeObject(data, "", fields); err != nil {
		return req, err
	}
	if len(req.Reason) > overrides.MaxReasonLen {
		return req, invalidf("reason: at most %d bytes, got %d", overrides.MaxReasonLen, len(req.Reason))
	}
	req.Cost = wireCost(req.Cost)
	return req, nil
}

// wireCost applies the wire default, on every door alike: gRPC cannot tell an unset cost from 0
// (proto3), so 0 means 1 there, and an explicit "cost": 0 (or the gate's ?cost=0) means 1 here
// too. A negative cost is passed on for the limiter to refuse, naming the field.
func wireCost(c int64) int64 {
	if c == 0 {
		return 1
	}
	return c
}

// settleRequest is the body of /v1/settle.
type settleRequest struct {
	Policy, Key      string
	Reserved, Actual int64
	Now              int64
}

func decodeSettle(data []byte) (settleRequest, error) {
	var req settleRequest
	err := decodeObject(data, "", []field{
		{"policy", true, "a string", &req.Policy},
		{"key", true, "a string", &req.Key},
		{"reserved", true, "an integer", &req.Reserved},
		{"actual", true, "an integer", &req.Actual},
		{"now", false, "an integer (epoch ms)", &req.Now},
	})
	return req, err
}

// slotRequest is the body of /v1/admit, /v1/heartbeat and /v1/release: each takes the fields its
// operation needs (slotOp), and no other.
type slotRequest struct {
	Name, Key, Holder string
	Limit, TTLMs      int64
	Now               int64
}

type slotOp int

const (
	slotAdmit slotOp = iota
	slotHeartbeat
	slotRelease
)

func decodeSlot(data []byte, op slotOp) (slotRequest, error) {
	var req slotRequest
	fields := []field{
		{"name", true, "a string", &req.Name},
		{"key", true, "a string", &req.Key},
		{"holder", true, "a string", &req.Holder},
	}
	if op == slotAdmit {
		fields = append(fields, field{"limit", true, "an integer", &req.Limit})
	}
	if op != slotRelease {
		fields = append(fields, field{"ttlMs", true, "an integer", &req.TTLMs}, field{"now", false, "an integer (epoch ms)", &req.Now})
	}
	err := decodeObject(data, "", fields)
	return req, err
}

// checkManyRequest is the body of /v1/check-many.
type checkManyRequest struct {
	Policy string
	Keys   []string
	Cost   int64
	Now    int64
}

func decodeCheckMany(data []byte) (checkManyRequest, error) {
	req := checkManyRequest{Cost: 1}
	err := decodeObject(data, "", []field{
		{"policy", true, "a string", &req.Policy},
		{"keys", true, "an array of strings", &req.Keys},
		{"cost", false, "an integer", &req.Cost},
		{"now", false, "an integer (epoch ms)", &req.Now},
	})
	req.Cost = wireCost(req.Cost)
	if err == nil && len(req.Keys) > MaxBatch {
		err = invalidf("keys: %d keys, at most %d per request", len(req.Keys), MaxBatch)
	}
	return req, err
}

// checkAllRequest is the body of /v1/check-all.
type checkAllRequest struct {
	Items []sluice.Item
	Now   int64
}

func decodeCheckAll(data []byte) (checkAllRequest, error) {
	var req checkAllRequest
	var raw []json.RawMessage
	err := decodeObject(data, "", []field{
		{"items", true, "an array of objects", &raw},
		{"now", false, "an integer (epoch ms)", &req.Now},
	})
	if err != nil {
		return req, err
	}
	if len(raw) > MaxBatch {
		return req, invalidf("items: %d items, at most %d per request", len(raw), MaxBatch)
	}
	req.Items = make([]sluice.Item, len(raw))
	for i, r := range raw {
		it := &req.Items[i]
		it.Cost = 1
		err := decodeObject(r, fmt.Sprintf("items[%d].", i), []field{
			{"policy", true, "a string", &it.Policy},
			{"key", true, "a string", &it.Key},
			{"cost", false, "an integer", &it.Cost},
		})
		if err != nil {
			return req, err
		}
		it.Cost = wireCost(it.Cost)
	}
	return req, nil
}
