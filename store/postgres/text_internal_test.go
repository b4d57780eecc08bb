package pgstore

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTextOf(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "user:42", "user:42"},
		{"UTF-8", "città/東京", "città/東京"},
		{"NUL", "a\x00b", "\x01610062"},
		{"invalid UTF-8", "\xff\xfe", "\x01fffe"},
		{"starts with the escape byte", "\x01", "\x0101"},
		{"looks escaped already", "\x0161", "\x01013631"},
		{"escape byte inside", "a\x01", "a\x01"},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := textOf(tt.in)
			if got != tt.want {
				t.Errorf("textOf(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
				t.Errorf("textOf(%q) = %q, which PostgreSQL's text cannot hold", tt.in, got)
			}
			if prev, ok := seen[got]; ok && prev != tt.in {
				t.Errorf("textOf(%q) = textOf(%q) = %q", tt.in, prev, got)
			}
			seen[got] = tt.in
		})
	}
}
