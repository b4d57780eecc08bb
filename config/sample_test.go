package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// sample is the annotated sample that docs/serve.md calls the reference of every field.
const sample = "../examples/serve/sluice.yaml"

// yamlKeys lists the keys of the file format, walking the yaml tags of t and of the structs it
// holds (through pointers, slices, maps and inline fields), each key once, in order of appearance.
func yamlKeys(t reflect.Type, keys []string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[yaml.Node]() {
		return keys
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name != "" && name != "-" && !slices.Contains(keys, name) {
			keys = append(keys, name)
		}
		if name != "-" && (opts == "inline" || name != "") {
			keys = yamlKeys(f.Type, keys)
		}
	}
	return keys
}

// commentedKey matches a line that is a field commented out: "# storeTimeout: 250ms".
var commentedKey = regexp.MustCompile(`(?m)^(\s*)# ([A-Za-z]+):( |$)`)

// TestSampleShowsEveryField holds examples/serve/sluice.yaml to what docs/serve.md says of it:
// every key of the format appears in it, set or commented out; it parses as it is; and with
// every commented-out field put back, it still parses, so the commented examples are valid too.
func TestSampleShowsEveryField(t *testing.T) {
	data, err := os.ReadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	keys := yamlKeys(reflect.TypeFor[file](), nil)
	if len(keys) < 40 {
		t.Fatalf("found only %d keys walking the format's types: %v", len(keys), keys)
	}
	for _, key := range keys {
		t.Run(key, func(t *testing.T) {
			if !regexp.MustCompile(`(?m)(^|[\s{,#])` + regexp.QuoteMeta(key) + `:`).MatchString(text) {
				t.Errorf("%s does not show the field %q: add it, commented out if this sample cannot use it", sample, key)
			}
		})
	}

	t.Run("parses as it is", func(t *testing.T) {
		if _, err := Parse(data); err != nil {
			t.Error(err)
		}
	})
	t.Run("parses with every field uncommented", func(t *testing.T) {
		uncommented := commentedKey.ReplaceAllStringFunc(text, func(line string) string {
			m := commentedKey.FindStringSubmatch(line)
			if !slices.Contains(keys, m[2]) {
				return line // prose that happens to start "Word:"
			}
			return m[1] + m[2] + ":" + m[3]
		})
		if uncommented == text {
			t.Fatal("no commented-out field found")
		}
		c, err := Parse([]byte(uncommented))
		if err != nil {
			t.Fatalf("%v\n%s", err, uncommented)
		}
		if !c.Lease("daily-plan") || !c.NearCache("login-ip") || len(c.Envoy) == 0 || len(c.TrustedProxies) == 0 || c.StoreTimeout == 0 {
			t.Errorf("the commented-out fields did not all apply: %+v", c)
		}
	})
}
