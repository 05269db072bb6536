package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads the YAML file at path over the defaults and completes the derived
// fields. It is strict: an unknown key, a duplicate key or a value of the
// wrong type is an error that names the key and its line. Load does not
// Validate.
func Load(path string) (*Config, error) {
	c := defaults()
	if err := c.loadFile(path); err != nil {
		return nil, err
	}
	c.Complete()
	return c, nil
}

func (c *Config) loadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	if err := c.decode(data); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

// decode overlays the YAML document in data onto c. Keys absent from the
// document, and keys whose value is null, keep c's values.
func (c *Config) decode(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file is all defaults
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return nil
	}
	return decodeStruct(root, reflect.ValueOf(c).Elem(), "")
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// decodeStruct walks a mapping node against a struct so that every error can
// name the full key ("backend.bolt.initial-mmap-size") and its line, which
// yaml's own KnownFields errors do not.
func decodeStruct(n *yaml.Node, v reflect.Value, prefix string) error {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		what := "the document"
		if prefix != "" {
			what = strings.TrimSuffix(prefix, ".")
		}
		return fmt.Errorf("line %d: %s: want a mapping of keys, got %s", n.Line, what, describe(n))
	}
	fields := yamlFields(v.Type())
	seen := make(map[string]int, len(n.Content)/2)
	var errs []error
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := resolve(n.Content[i]), n.Content[i+1]
		key := prefix + kn.Value
		if line, dup := seen[kn.Value]; dup {
			errs = append(errs, fmt.Errorf("line %d: %s: duplicate key (first at line %d)", kn.Line, key, line))
			continue
		}
		seen[kn.Value] = kn.Line
		idx, ok := fields[kn.Value]
		if !ok {
			errs = append(errs, fmt.Errorf("line %d: %s: unknown key%s", kn.Line, key, suggest(kn.Value, fields)))
			continue
		}
		if isNull(vn) {
			continue
		}
		f := v.Field(idx)
		if isPlainStruct(f.Type()) {
			if err := decodeStruct(vn, f, key+"."); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if f.Kind() == reflect.Slice && isPlainStruct(f.Type().Elem()) {
			if err := decodeStructList(vn, f, key); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := decodeValue(vn, f); err != nil {
			errs = append(errs, fmt.Errorf("line %d: %s: %w", resolve(vn).Line, key, err))
		}
	}
	return errors.Join(errs...)
}

// isPlainStruct reports whether t is a struct that decodeStruct walks key by
// key, rather than one that decodes itself.
func isPlainStruct(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType)
}

// decodeStructList decodes a list of mappings into a slice of structs, each
// element as strictly as a section ("auth-plugins[0].command"). The list
// replaces f's value, and only when every element decoded.
func decodeStructList(n *yaml.Node, f reflect.Value, key string) error {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: %s: want a list of mappings, got %s", n.Line, key, describe(n))
	}
	s := reflect.MakeSlice(f.Type(), len(n.Content), len(n.Content))
	var errs []error
	for i, en := range n.Content {
		if err := decodeStruct(en, s.Index(i), fmt.Sprintf("%s[%d].", key, i)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	f.Set(s)
	return nil
}

// decodeValue decodes a leaf into a fresh value and stores it only on success,
// so a failed key leaves its default.
func decodeValue(n *yaml.Node, f reflect.Value) error {
	p := reflect.New(f.Type())
	if err := n.Decode(p.Interface()); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return fmt.Errorf("want %s, got %s", typeName(f.Type()), describe(resolve(n)))
		}
		return err
	}
	f.Set(p.Elem())
	return nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "an empty value"
		}
		return fmt.Sprintf("%q", n.Value)
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(typeName(t.Elem()), "a "), "an ") + "s"
	default:
		return t.String()
	}
}

// yamlFields maps each yaml key of struct type t to its field index.
func yamlFields(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			m[name] = i
		}
	}
	return m
}

// suggest names the known key closest to an unknown one, for typos.
func suggest(key string, fields map[string]int) string {
	best, bestDist := "", len(key)/3+1
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
