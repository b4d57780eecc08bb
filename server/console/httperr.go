package console

import (
	"encoding/json"
	"net/http"
)

// Error codes of the {"error","code"} body, as the HTTP API's (package httpapi) spells them.
const (
	codeInvalid       = "invalid_argument"
	codeNotFound      = "not_found"
	codeUnavailable   = "unavailable"
	codeUnimplemented = "unimplemented"
	codeTooLarge      = "too_large"
)

// errorBody is the body of every error answer, the HTTP API's shape.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// writeError answers status with the HTTP API's error body; msg starts with "console: ".
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may have gone; nothing to do about it
}
