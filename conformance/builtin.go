package conformance

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
)

// The vector files every store is checked against, built into the binary, so that sluice
// conformance can check a deployment's store with nothing beside it.
//
//go:embed testdata/vectors/*.json
var builtinFS embed.FS

// Named is a vector file with the name it goes by in messages.
type Named struct {
	Name string
	File *File
}

// Builtin parses the vector files built into the package (conformance/testdata/vectors), in name
// order. Their names are "builtin:" and the file's base name.
func Builtin() ([]Named, error) {
	paths, err := fs.Glob(builtinFS, "testdata/vectors/*.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	out := make([]Named, 0, len(paths))
	for _, p := range paths {
		data, err := builtinFS.ReadFile(p)
		if err != nil {
			return nil, err
		}
		name := "builtin:" + p[len("testdata/vectors/"):]
		f, err := Parse(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, Named{Name: name, File: f})
	}
	return out, nil
}
