//go:build unix

package redistest

import (
	"bufio"
	"net"
	"testing"
	"time"
)

func TestFreezeThaw(t *testing.T) {
	s := StartServer(t)
	if s.Pid() == 0 {
		t.Fatal("Pid is 0 for a running server")
	}
	// pingWithin is PING with a deadline: do's 5 s would hang on a frozen server.
	pingWithin := func(d time.Duration) error {
		c, err := net.DialTimeout("tcp", s.Addr(), d)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(d))
		if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
			return err
		}
		_, err = bufio.NewReader(c).ReadString('\n')
		return err
	}
	s.Freeze()
	if err := pingWithin(200 * time.Millisecond); err == nil {
		t.Fatal("a frozen server answered PING")
	}
	s.Thaw()
	if err := pingWithin(time.Second); err != nil {
		t.Fatalf("PING after Thaw: %v", err)
	}
	s.Kill()
	if s.Pid() != 0 {
		t.Error("Pid is not 0 after Kill")
	}
	s.Freeze() // no-ops while not running
	s.Thaw()
}
