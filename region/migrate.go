package region

import (
	"embed"

	"github.com/sluicehq/sluice/internal/pgmigrate"
)

// The coordinator's schema: migrations/NNNN_name.sql (package pgmigrate).
//
//go:embed migrations/*.sql
var schemaFiles embed.FS

var migrations = pgmigrate.New(schemaFiles, "sluice region migrations")
