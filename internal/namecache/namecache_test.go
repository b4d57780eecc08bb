package namecache

import (
	"strings"
	"testing"
)

func TestCache(t *testing.T) {
	const name = "policy"
	built := strings.Clone(name) // equal, but other bytes
	tests := []struct {
		name   string
		put    []string
		get    string
		wantOK bool
	}{
		{"empty", nil, name, false},
		{"the same string", []string{name}, name, true},
		{"an equal string with other bytes", []string{name}, built, false},
		{"a prefix of the stored bytes", []string{name}, name[:3], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Cache[int]
			for i, p := range tt.put {
				c.Put(p, i+1)
			}
			v, ok := c.Get(tt.get)
			if ok != tt.wantOK || ok && v != 1 {
				t.Errorf("Get = %d, %v; want ok %v", v, ok, tt.wantOK)
			}
		})
	}
}

func BenchmarkGet(b *testing.B) {
	var c Cache[*int]
	one := 1
	c.Put("policy", &one)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := c.Get("policy"); !ok {
				b.Fatal("miss")
			}
		}
	})
}
