package memory_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/store/memory"
)

// TestCoalesced runs the shared stores' test of concurrent callers on the memory store, which
// coalesces nothing: each call is decided on its own, so it passes by construction, and keeps the
// test honest about what alone means.
func TestCoalesced(t *testing.T) {
	storetest.Coalesced(t, openStore(t, memory.Config{}))
}
