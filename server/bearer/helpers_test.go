package bearer

import "testing"

// MustParse parses a token file in a test.
func MustParse(t *testing.T, file string) *Set {
	t.Helper()
	s, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
