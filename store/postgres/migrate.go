package pgstore

import (
	"embed"

	"github.com/sluicehq/sluice/internal/pgmigrate"
)

// The schema's files (package pgmigrate): migrations/NNNN_name.sql make the tables, functions.sql
// holds every function.
//
//go:embed migrations/*.sql functions.sql
var schemaFiles embed.FS

var migrations = pgmigrate.New(schemaFiles, "sluice migrations")
