package console

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// contentSecurityPolicy lets the console's pages run only the server's own scripts and styles
// and talk only to the server: a key shown on a page can never become markup that runs.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Assets serves the console's pages and scripts under /ui/ (GET and HEAD). They hold no data, so
// they need no token: the pages ask for one before they call the API.
func (c *Console) Assets() http.Handler {
	sub, _ := fs.Sub(assets, "assets") // the directory is embedded: Sub cannot fail
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		switch {
		case r.URL.Path == "/ui":
			http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
		case r.URL.Path != "/ui/" && strings.HasSuffix(r.URL.Path, "/"):
			// No directory listings: the pages are the interface, not the file tree.
			writeError(w, http.StatusNotFound, codeNotFound, "console: no such page")
		default:
			files.ServeHTTP(w, r)
		}
	})
}
