package main

import (
	"fmt"
	"io"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

const supportedStores = "memory (or memory://)"

// openStore opens the store that url names; the closer releases it. Shared stores plug in here.
func openStore(url string) (sluice.Store, io.Closer, error) {
	switch url {
	case "memory", "memory://":
		s := memory.New(memory.Config{})
		return s, s, nil
	}
	return nil, nil, fmt.Errorf("unsupported store %q; supported: %s", url, supportedStores)
}
