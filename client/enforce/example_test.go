package enforce_test

import (
	"context"
	"log"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/client/enforce"
)

// A gateway enforces stream "api"'s throttle decisions locally: a request of a key over its quota
// is refused at once, without a call to the service. (It needs a running `sluice serve` with
// stream mode, so it has no output to check.)
func ExampleEnforcer() {
	c, err := client.New("http://127.0.0.1:8080", client.Options{Token: "secret"})
	if err != nil {
		log.Fatal(err)
	}
	enf, err := enforce.New(context.Background(), c, "api", enforce.Config{
		// A gateway that stored enf.Offset() at its last stop would start after it here.
		OnError: func(err error) { log.Printf("sluice decisions: %v (known blocks still apply)", err) },
	})
	if err != nil {
		log.Fatal(err) // the service refused the subscription, or could not be reached in time
	}
	defer enf.Close()

	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if until, blocked := enf.Blocked(r.Header.Get("X-Api-Key")); blocked {
			w.Header().Set("Retry-After", strconv.FormatInt(int64(time.Until(until)/time.Second)+1, 10))
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		// Serve the request, and report it to stream "api" (POST /v1/usage).
	})
	log.Fatal(http.ListenAndServe(":8081", nil))
}
