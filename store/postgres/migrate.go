package pgstore

import (
	"embed"

	"github.com/sluicehq/sluice/internal/pgmigrate"
)

// The schema's migrations: migrations/NNNN_name.sql (package pgmigrate).
//
//go:embed migrations/*.sql
var schemaFiles embed.FS

var migrations = pgmigrate.New(schemaFiles, "sluice migrations")
