// Package sluicev1 holds the generated Go code of sluice.proto, sluice serve's native gRPC API.
// The generators are pinned by the tool directives of go.mod; regenerate with go generate (protoc
// must be on PATH) and commit the result.
package sluicev1

//go:generate sh -c "protoc --go_out=paths=source_relative:. --go-grpc_out=paths=source_relative:. --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) sluice.proto"
