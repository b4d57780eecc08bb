package server_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/topkeys"
)

// BenchmarkCheckTopKeys is a Check through the Server on the memory store's hot key, as a front
// end asks it, without and with the console's top keys (server.Options.Keys): what a check pays
// for them. Run both in one process, alternating, to compare (docs/benchmarks.md).
func BenchmarkCheckTopKeys(b *testing.B) {
	const cfg = "policies:\n  hot: {strategy: gcra, limit: 1000000, period: 1s, burst: 1000000}\n"
	for _, on := range []bool{false, true} {
		opts := server.Options{Local: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		name := "topKeys=off"
		if on {
			keys, err := topkeys.New(topkeys.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer keys.Close()
			opts.Keys, name = keys, "topKeys=on"
		}
		srv, err := server.New(parse(b, cfg), memStore(b), opts)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.Run(name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := srv.Check(ctx, 0, "hot", "the-hot-key", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := srv.Check(ctx, 0, "hot", "the-hot-key", 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
