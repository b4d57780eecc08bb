package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
	redisstore "github.com/sluicehq/sluice/store/redis"
)

const supportedStores = "memory (or memory://), redis://host:port[/db], redis-sentinel://host:port,…?master=NAME, " +
	"redis-cluster://host:port,… (rediss… for TLS)"

// openStore opens the store that url names; the closer releases it. Shared stores plug in here.
func openStore(url string) (sluice.Store, io.Closer, error) {
	switch url {
	case "memory", "memory://":
		s := memory.New(memory.Config{})
		return s, s, nil
	}
	if strings.HasPrefix(url, "redis://") || strings.HasPrefix(url, "rediss://") || strings.HasPrefix(url, "redis-") || strings.HasPrefix(url, "rediss-") {
		s, err := redisstore.Open(url)
		if err != nil {
			return nil, nil, fmt.Errorf("store %q: %w", url, err)
		}
		return s, s, nil
	}
	return nil, nil, fmt.Errorf("unsupported store %q; supported: %s", url, supportedStores)
}
