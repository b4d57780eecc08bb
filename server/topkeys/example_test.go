package topkeys_test

import (
	"fmt"

	"github.com/sluicehq/sluice/server/topkeys"
)

func ExampleTracker() {
	t, err := topkeys.New(topkeys.Config{})
	if err != nil {
		panic(err)
	}
	defer t.Close()

	// What the service does on every check: the policy, the key, whether it was denied.
	for i := range 50 {
		t.Observe("api", "alice", i >= 40)
	}
	for range 5 {
		t.Observe("api", "bob", false)
	}
	t.Observe("login", "mallory", true)

	t.Flush() // Top flushes too; the console's page asks for it every few seconds
	for _, policy := range t.Policies(topkeys.Minute) {
		checked, denied := t.Top(policy, topkeys.Minute, 10)
		fmt.Printf("%s: %d checks %v, %d denials %v\n", policy, checked.Total, checked.Keys, denied.Total, denied.Keys)
	}
	// Output:
	// api: 55 checks [{alice 50 0} {bob 5 0}], 10 denials [{alice 10 0}]
	// login: 1 checks [{mallory 1 0}], 1 denials [{mallory 1 0}]
}
