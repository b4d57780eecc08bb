package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgresURL is the test database (SLUICE_POSTGRES_URL, else a local server) with a schema of its
// own, dropped when the test ends. Without a database the test is skipped, or fails under CI.
func postgresURL(t *testing.T) string {
	t.Helper()
	base := os.Getenv("SLUICE_POSTGRES_URL")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		msg := fmt.Sprintf("no PostgreSQL at %s (set SLUICE_POSTGRES_URL or start postgres): %v", base, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	schema := fmt.Sprintf("sluice_cmd_test_%d_%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "sluice_schema=" + schema
}

func TestOpenStorePostgres(t *testing.T) {
	url := postgresURL(t)
	for _, u := range []string{url, "postgresql://" + strings.TrimPrefix(url, "postgres://")} {
		store, closer, err := openStore(u)
		if err != nil || store == nil || closer == nil {
			t.Fatalf("openStore(%q) = %v, %v, %v", u, store, closer, err)
		}
		if err := closer.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

func TestOpenStorePostgresUnreachable(t *testing.T) {
	_, _, err := openStore("postgres://postgres:secret@127.0.0.1:1/test?connect_timeout=1")
	if err == nil {
		t.Fatal("openStore of a closed port succeeded")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q shows the password", err)
	}
}

// TestConformancePostgres runs every conformance vector against PostgreSQL through the CLI.
func TestConformancePostgres(t *testing.T) {
	url := postgresURL(t)
	vectors, err := filepath.Glob("../../conformance/testdata/vectors/*.json")
	if err != nil || len(vectors) == 0 {
		t.Fatalf("no vector files in ../../conformance/testdata/vectors (err %v)", err)
	}
	var stdout, stderr bytes.Buffer
	args := append([]string{"conformance", "--store", url}, flagEach("--vectors", vectors)...)
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	want := strconv.Itoa(countSteps(t, vectors...)) + " passed, 0 failed\n"
	if stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
}
