package pgstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/storetest"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

func TestDeniedGroupsSpendNothing(t *testing.T) {
	s, _, _ := newStore(t, pgstore.Config{})
	storetest.DeniedGroups(t, s)
}

func TestOneItemCheckAllIsACheck(t *testing.T) {
	s, _, _ := newStore(t, pgstore.Config{})
	storetest.OneItemCheckAll(t, s)
}

func TestConcurrentCheckAllsExact(t *testing.T) {
	s, _, _ := newStore(t, pgstore.Config{})
	storetest.ConcurrentCheckAll(t, s)
}
