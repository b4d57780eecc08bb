package memory_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/store/memory"
)

func TestKeysApart(t *testing.T) {
	storetest.KeysApart(t, openStore(t, memory.Config{}))
}

func TestStrategyChange(t *testing.T) {
	storetest.StrategyChange(t, openStore(t, memory.Config{}))
}
