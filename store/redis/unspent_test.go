package redisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/storetest"
)

func TestDeniedGroupsSpendNothing(t *testing.T) {
	s, _, _ := newStore(t)
	storetest.DeniedGroups(t, s)
}

func TestOneItemCheckAllIsACheck(t *testing.T) {
	s, _, _ := newStore(t)
	storetest.OneItemCheckAll(t, s)
}

func TestConcurrentCheckAllsExact(t *testing.T) {
	s, _, _ := newStore(t)
	storetest.ConcurrentCheckAll(t, s)
}
