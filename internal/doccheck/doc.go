// Package doccheck holds the tests that keep the code in README.md and docs/*.md working: every
// Go block compiles (and passes go vet), the Go programs marked to run print what the document says
// they print, and the shell blocks marked to run succeed. It has no code of its own.
//
// # The rule for code blocks
//
// A marker is an HTML comment on the line before a fenced block (blank lines between are allowed),
// invisible once rendered:
//
//	<!-- doccheck: run -->
//
// A ```go block always compiles, in a package of its own, with go vet. It is one of:
//
//   - A file: it starts with a package clause. It is built as it is, its imports its own. With
//     the marker "run", a package main is also run, and its output must match the block marked
//     "output" that follows it (a ```text block, with nothing fenced between the two).
//   - Declarations (funcs, types, vars, consts, without a package clause): put in a package with
//     the imports they need, found by package name: this module's packages (sluice, memory,
//     redisstore, lease, region, client, ...), the standard library's common ones (context, errors,
//     fmt, log, time, strconv, net/http, ...) and pgxpool. A name this table lacks is an error
//     saying so (importTable).
//   - Statements: the body of a function, with the same imports. A block that uses variables it
//     does not declare names them, with their types, in the marker "func(...)", which is the
//     signature of the function the block becomes the body of:
//     <!-- doccheck: func(ctx context.Context, lim *sluice.Limiter, tenant string) -->. Variables
//     the block declares at its top level and does not use again are used for it, so that a
//     block may end on "d, err := lim.Check(...)".
//
// A Go block that is not meant to compile (pseudo-code, a sketch of an API to come) says so and
// why: <!-- doccheck: skip: REASON -->. Otherwise fence it as ```text, not ```go.
//
// A shell block (```sh, ```bash, ```shell) runs only with the marker "run"; unmarked, it is only
// read (a benchmark of minutes, Docker, a daemon, a machine of its own). A block marked "run" runs
// each command, from the repository root, under bash -o pipefail, failing on a non-zero exit:
//
//   - go run ./cmd/sluice runs a sluice built once for the test.
//   - sluice serve starts in the background (with --http and --grpc on free ports) and serves
//     the document's later run blocks until the document ends; in their commands, localhost:8080
//     and 127.0.0.1:8080 (8081) become its HTTP (gRPC) address.
//   - A comment right after a command that is JSON ("# {...}") is the command's output: equal as
//     JSON, except that an instant (a number of epoch milliseconds, from 10^12) matches any instant.
//   - A command whose first word is not installed (curl), or that names a redis:// or postgres://
//     address nothing listens on, is skipped and logged.
package doccheck
