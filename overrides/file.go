package overrides

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// fileFormat names the layout of the file Config.File names.
const fileFormat = "sluice-overrides/1"

// fileDoc is the file: {"format": "sluice-overrides/1", "overrides": [...]}.
type fileDoc struct {
	Format    string            `json:"format"`
	Overrides []json.RawMessage `json:"overrides"`
}

// fileBackend keeps the overrides of one process in a file, rewritten whole and atomically on
// every change: the Backend of a Table with Config.File. No other process writes the file, so
// Watch has nothing to deliver.
type fileBackend struct {
	path string
	mu   sync.Mutex
	all  map[[2]string]Override
}

// openFile reads the file at path; a missing file is no overrides yet, a file that cannot be read
// as overrides an error naming it.
func openFile(path string) (*fileBackend, error) {
	f := &fileBackend{path: path, all: map[[2]string]Override{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("overrides: reading %s: %w", path, err)
	}
	var doc fileDoc
	if err := decode(data, &doc); err != nil {
		return nil, fmt.Errorf("overrides: %s is not an overrides file: %w", path, err)
	}
	if doc.Format != fileFormat {
		return nil, fmt.Errorf("overrides: %s is not an overrides file: format %q, want %q", path, doc.Format, fileFormat)
	}
	for i, raw := range doc.Overrides {
		o, err := DecodeOverride(raw)
		if err != nil {
			return nil, fmt.Errorf("overrides: %s: overrides[%d]: %w", path, i, err)
		}
		f.all[[2]string{o.Policy, o.Key}] = o
	}
	return f, nil
}

func (f *fileBackend) Apply(_ context.Context, c Change) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ref := [2]string{c.Override.Policy, c.Override.Key}
	old, existed := f.all[ref]
	switch c.Op {
	case OpPut:
		f.all[ref] = c.Override
	case OpDelete:
		delete(f.all, ref)
	case OpExpire:
		if !existed || old.Live(c.Override.ExpiresAt) {
			return false, nil
		}
		delete(f.all, ref)
	default:
		return false, fmt.Errorf("overrides: cannot apply a change of op %q", c.Op)
	}
	if err := f.write(); err != nil {
		if existed {
			f.all[ref] = old
		} else {
			delete(f.all, ref)
		}
		return false, err
	}
	return existed, nil
}

func (f *fileBackend) Load(context.Context) ([]Override, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Override, 0, len(f.all))
	for _, o := range f.all {
		out = append(out, o.clone())
	}
	return out, nil
}

func (f *fileBackend) Watch(context.Context, func(Change)) error { return nil }

// write writes every override to a temporary file beside the file, syncs it and renames it over
// the file: a crash leaves the old file or the new one, never half of one.
func (f *fileBackend) write() error {
	list := make([]Override, 0, len(f.all))
	for _, o := range f.all {
		list = append(list, o)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Policy != list[j].Policy {
			return list[i].Policy < list[j].Policy
		}
		return list[i].Key < list[j].Key
	})
	doc := fileDoc{Format: fileFormat, Overrides: make([]json.RawMessage, len(list))}
	for i, o := range list {
		b, err := marshal(o)
		if err != nil {
			return err
		}
		doc.Overrides[i] = b
	}
	data, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(f.path)
	tmp, err := os.CreateTemp(dir, filepath.Base(f.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("overrides: writing %s: %w", f.path, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing to remove
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.path)
	}
	if err != nil {
		return fmt.Errorf("overrides: writing %s: %w", f.path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename itself, on file systems that need it
		d.Close()
	}
	return nil
}
