package enforce

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// Limits of what the SSE parser holds: a decision is a few hundred bytes.
const (
	maxSSELine  = 64 << 10
	maxSSEEvent = 1 << 20
)

// sseEvent is one dispatched Server-Sent Event: its type ("message" when unnamed), its data
// (lines joined by "\n") and the last event ID the stream set.
type sseEvent struct {
	typ, data, id string
}

// sseParser reads Server-Sent Events as the HTML standard's event-stream format: lines end in
// CRLF, LF or CR; ":" starts a comment; a blank line dispatches the event, unless it has no data.
// It reads outside input, so it bounds lines and events (FuzzSSE).
type sseParser struct {
	r       *bufio.Reader
	line    []byte
	started bool // past the optional byte order mark
	skipLF  bool // the last line ended in CR: an LF next belongs to it
	typ     []byte
	data    []byte
	id      string
}

func newSSEParser(r io.Reader) *sseParser { return &sseParser{r: bufio.NewReader(r)} }

var bom = []byte("\uFEFF")

// next returns the next event; an event the stream left incomplete is dropped with its error.
func (p *sseParser) next() (sseEvent, error) {
	for {
		line, err := p.readLine()
		if err != nil {
			return sseEvent{}, err
		}
		if !p.started {
			p.started = true
			line = bytes.TrimPrefix(line, bom)
		}
		if len(line) == 0 {
			if len(p.data) == 0 {
				p.typ = p.typ[:0]
				continue
			}
			ev := sseEvent{typ: "message", data: string(p.data[:len(p.data)-1]), id: p.id}
			if len(p.typ) > 0 {
				ev.typ = string(p.typ)
			}
			p.typ, p.data = p.typ[:0], p.data[:0]
			return ev, nil
		}
		if line[0] == ':' {
			continue // a comment, such as the server's keep-alive
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if found {
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(name) {
		case "event":
			p.typ = append(p.typ[:0], value...)
		case "data":
			if len(p.data)+len(value)+1 > maxSSEEvent {
				return sseEvent{}, fmt.Errorf("enforce: an event holds more than %d bytes of data", maxSSEEvent)
			}
			p.data = append(append(p.data, value...), '\n')
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				p.id = string(value)
			}
		}
		// retry and unknown fields are ignored: the enforcer keeps its own backoff.
	}
}

// readLine returns the next line without its end, valid until the next call.
func (p *sseParser) readLine() ([]byte, error) {
	p.line = p.line[:0]
	for {
		b, err := p.r.ReadByte()
		if err != nil {
			return nil, err
		}
		if p.skipLF {
			p.skipLF = false
			if b == '\n' {
				continue
			}
		}
		switch b {
		case '\n':
			return p.line, nil
		case '\r':
			p.skipLF = true
			return p.line, nil
		}
		if len(p.line) == maxSSELine {
			return nil, fmt.Errorf("enforce: a Server-Sent Events line is longer than %d bytes", maxSSELine)
		}
		p.line = append(p.line, b)
	}
}
