package config

import (
	"net/url"
	"regexp"
	"strings"
)

// redacted stands in for a password in a URL shown in a log or an error.
const redacted = "xxxxx"

// dsnPassword finds password=… in a keyword/value connection string (PostgreSQL's).
var dsnPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// RedactURL returns a store URL fit for a log or an error: its userinfo password and any
// password query parameter replaced by xxxxx, the rest as written. It parses by hand, since store
// URLs list several hosts (redis-cluster://a:1,b:2) that net/url refuses.
func RedactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return dsnPassword.ReplaceAllString(s, "${1}"+redacted)
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		if user, _, hasPass := strings.Cut(authority[:at], ":"); hasPass {
			authority = user + ":" + redacted + authority[at:]
		}
	}
	if path, query, ok := strings.Cut(tail, "?"); ok {
		frag := ""
		if i := strings.IndexByte(query, '#'); i >= 0 {
			query, frag = query[:i], query[i:]
		}
		params := strings.Split(query, "&")
		for i, p := range params {
			name, _, _ := strings.Cut(p, "=")
			if n, err := url.QueryUnescape(name); err == nil && strings.Contains(strings.ToLower(n), "password") {
				params[i] = name + "=" + redacted
			}
		}
		tail = path + "?" + strings.Join(params, "&") + frag
	}
	return scheme + "://" + authority + tail
}

// RedactIn returns text with every appearance of the URL s, and of its password, redacted: for
// errors from a store's client, which may quote the URL they were given.
func RedactIn(text, s string) string {
	if s == "" {
		return text
	}
	text = strings.ReplaceAll(text, s, RedactURL(s))
	if _, rest, ok := strings.Cut(s, "://"); ok {
		authority, _, _ := strings.Cut(rest, "/")
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			if _, pass, ok := strings.Cut(authority[:at], ":"); ok && len(pass) >= 4 {
				text = strings.ReplaceAll(text, pass, redacted)
			}
		}
	}
	return text
}
