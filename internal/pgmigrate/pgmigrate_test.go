package pgmigrate_test

import (
	"testing"
	"testing/fstest"

	"github.com/sluicehq/sluice/internal/pgmigrate"
)

func TestLoad(t *testing.T) {
	ms := pgmigrate.Load(fstest.MapFS{
		"m/0002_more.sql": {Data: []byte("SELECT 2")},
		"m/0001_init.sql": {Data: []byte("SELECT 1")},
		"m/README":        {Data: []byte("not a migration")},
	}, "m")
	if len(ms) != 2 || ms[0].Version != 1 || ms[0].Name != "0001_init.sql" || ms[1].SQL != "SELECT 2" {
		t.Fatalf("Load: %+v", ms)
	}
}

// Misnumbered migrations are a programming error: Load panics rather than apply them out of order.
func TestLoadRefusesGaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
	}{
		{"a gap", []string{"0001_a.sql", "0003_c.sql"}},
		{"not from 1", []string{"0002_b.sql"}},
		{"no number", []string{"init.sql"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for _, f := range tc.files {
				fsys["m/"+f] = &fstest.MapFile{Data: []byte("SELECT 1")}
			}
			defer func() {
				if recover() == nil {
					t.Fatal("Load did not panic")
				}
			}()
			pgmigrate.Load(fsys, "m")
		})
	}
}
