package pgtest_test

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/pgtest"
)

// psql runs one statement on s.
func psql(t *testing.T, s *pgtest.Server, sql string) (string, error) {
	t.Helper()
	out, err := exec.Command(filepath.Join(pgtest.Require(t), "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port()),
		"-U", "postgres", "-d", "postgres", "-Atqc", sql).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestKillKeepsCommitted(t *testing.T) {
	s := pgtest.StartServer(t)
	if _, err := psql(t, s, "create table t (n int); insert into t values (42)"); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if _, err := psql(t, s, "select 1"); err == nil {
		t.Fatal("the killed server still answers")
	}
	s.Start()
	if got, err := psql(t, s, "select n from t"); err != nil || got != "42" {
		t.Fatalf("after a crash: %q, %v; want the committed 42", got, err)
	}
	s.Stop()
	s.Start()
	if got, err := psql(t, s, "select n from t"); err != nil || got != "42" {
		t.Fatalf("after a clean restart: %q, %v", got, err)
	}
}
