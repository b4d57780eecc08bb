package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// respError is an error reply (-ERR ...) from Redis.
type respError string

func (e respError) Error() string { return string(e) }

// do sends one command on a fresh connection and returns the reply:
// string (simple and bulk), int64, nil, or []any.
func do(addr string, args ...any) (any, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return nil, err
	}
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		s := fmt.Sprint(a)
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(s), s)
	}
	if _, err := c.Write(b); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c))
}

// doString is do for commands whose reply is a (simple or bulk) string.
func doString(addr string, args ...any) (string, error) {
	r, err := do(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := r.(string)
	if !ok {
		return "", fmt.Errorf("%v: unexpected reply %#v", args, r)
	}
	return s, nil
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, respError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, fmt.Errorf("unknown reply type %q", line)
}

// infoField returns the value of key in an INFO / CLUSTER INFO reply.
func infoField(info, key string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// infoWant checks that INFO-style reply fields on addr have the wanted values.
func infoWant(addr string, cmd []any, want map[string]string) error {
	info, err := doString(addr, cmd...)
	if err != nil {
		return fmt.Errorf("%s: %v", addr, err)
	}
	for k, v := range want {
		if got := infoField(info, k); got != v {
			return fmt.Errorf("%s: %s is %q, want %q", addr, k, got, v)
		}
	}
	return nil
}

// pairs turns a flat [k1 v1 k2 v2 ...] reply into a map.
func pairs(r any) map[string]string {
	arr, _ := r.([]any)
	m := make(map[string]string, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		v, _ := arr[i+1].(string)
		m[k] = v
	}
	return m
}
