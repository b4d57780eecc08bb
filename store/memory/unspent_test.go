package memory_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/store/memory"
)

func TestDeniedGroupsSpendNothing(t *testing.T) {
	storetest.DeniedGroups(t, openStore(t, memory.Config{}))
}

func TestOneItemCheckAllIsACheck(t *testing.T) {
	storetest.OneItemCheckAll(t, openStore(t, memory.Config{}))
}

func TestConcurrentCheckAllsExact(t *testing.T) {
	storetest.ConcurrentCheckAll(t, openStore(t, memory.Config{}))
}
