package pgstream

import (
	"embed"

	"github.com/sluicehq/sluice/internal/pgmigrate"
)

// The engine's schema: migrations/NNNN_name.sql (package pgmigrate).
//
//go:embed migrations/*.sql
var schemaFiles embed.FS

var migrations = pgmigrate.New(schemaFiles, "sluice stream migrations")
