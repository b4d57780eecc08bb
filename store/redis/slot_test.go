package redisstore

import "testing"

func TestSlot(t *testing.T) {
	tests := []struct {
		key  string
		want uint16
	}{
		// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
		{"foo", 12182},
		{"somekey", 11058},
		{"123456789", 0x31c3 & 16383},
		{"{foo}.bar", 12182},
		{"a{foo}b{bar}", 12182},
		{"{}foo", crc16("{}foo") & 16383}, // an empty tag hashes the whole key
		{"sluice:{p:k}:1", slot("sluice:{p:k}")},
	}
	for _, tt := range tests {
		if got := slot(tt.key); got != tt.want {
			t.Errorf("slot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
}
