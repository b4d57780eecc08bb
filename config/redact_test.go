package config_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

func TestRedactURL(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"memory", "memory", "memory"},
		{"no userinfo", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"user only", "postgres://postgres@127.0.0.1:5432/test", "postgres://postgres@127.0.0.1:5432/test"},
		{"password", "redis://default:hunter2@10.0.0.1:6379", "redis://default:xxxxx@10.0.0.1:6379"},
		{"password, no user", "rediss://:hunter2@cache:6380/1", "rediss://:xxxxx@cache:6380/1"},
		{"@ in the password", "postgres://u:p@ss@db/x", "postgres://u:xxxxx@db/x"},
		{"several hosts", "redis-cluster://u:hunter2@a:1,b:2", "redis-cluster://u:xxxxx@a:1,b:2"},
		{"password parameter", "postgres://db/x?sslmode=require&password=hunter2", "postgres://db/x?sslmode=require&password=xxxxx"},
		{"sentinel password parameter", "redis-sentinel://a:1,b:2?master=m&sentinel_password=hunter2#f", "redis-sentinel://a:1,b:2?master=m&sentinel_password=xxxxx#f"},
		{"escaped parameter name", "postgres://db/x?pass%77ord=hunter2", "postgres://db/x?pass%77ord=xxxxx"},
		{"key/value string", "host=db user=u password=hunter2 dbname=x", "host=db user=u password=xxxxx dbname=x"},
		{"quoted key/value password", "host=db password='hun ter2' dbname=x", "host=db password=xxxxx dbname=x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := config.RedactURL(tt.in)
			if got != tt.want {
				t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if strings.Contains(got, "hunter2") || strings.Contains(got, "hun ter2") {
				t.Errorf("RedactURL(%q) = %q keeps the password", tt.in, got)
			}
		})
	}
}

func TestRedactIn(t *testing.T) {
	const u = "redis://default:hunter2@10.0.0.1:6379"
	for _, text := range []string{
		`parse "` + u + `": bad port`,
		"auth failed for password hunter2",
	} {
		if got := config.RedactIn(text, u); strings.Contains(got, "hunter2") {
			t.Errorf("RedactIn(%q) = %q", text, got)
		}
	}
}

func FuzzRedactURL(f *testing.F) {
	for _, seed := range []string{"redis://u:p4ssword@h:1", "postgres://h/d?password=p4ssword", "password=p4ssword", "a://@:/?#&="} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := config.RedactURL(s)
		if strings.Contains(s, "p4ssword") && strings.Contains(got, "p4ssword") &&
			(strings.Contains(s, ":p4ssword@") || strings.Contains(s, "password=p4ssword")) && !strings.Contains(s, "p4sswordp4ssword") {
			if strings.Count(got, "p4ssword") >= strings.Count(s, "p4ssword") {
				t.Fatalf("RedactURL(%q) = %q", s, got)
			}
		}
	})
}
