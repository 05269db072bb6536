package config

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// docPath is the reference of every config key, its flag, default and meaning.
const docPath = "../../docs/configuration.md"

// schemaKey is one leaf key of the config file: its dotted name
// ("backend.bolt.freelist-type", "auth-plugins[].timeout") and how to reach
// its field from a Config (or, under auth-plugins[], from an AuthPlugin).
type schemaKey struct {
	name   string
	inList bool // under auth-plugins[]
	index  []int
}

// schemaKeys walks the Config struct's yaml tags as Load does.
func schemaKeys() []schemaKey {
	var keys []schemaKey
	var walk func(t reflect.Type, prefix string, inList bool, index []int)
	walk = func(t reflect.Type, prefix string, inList bool, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			idx := append(slices.Clone(index), i)
			switch {
			case isPlainStruct(f.Type):
				walk(f.Type, prefix+tag+".", inList, idx)
			case f.Type.Kind() == reflect.Slice && isPlainStruct(f.Type.Elem()):
				walk(f.Type.Elem(), prefix+tag+"[].", true, nil)
			default:
				keys = append(keys, schemaKey{name: prefix + tag, inList: inList, index: idx})
			}
		}
	}
	walk(reflect.TypeFor[Config](), "", false, nil)
	return keys
}

// value is k's field in c, or for a key under auth-plugins[], in p.
func (k schemaKey) value(c *Config, p *AuthPlugin) reflect.Value {
	if k.inList {
		return reflect.ValueOf(p).Elem().FieldByIndex(k.index)
	}
	return reflect.ValueOf(c).Elem().FieldByIndex(k.index)
}

// docDefault is how configuration.md writes a default value.
func docDefault(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return `""`
		}
		v = v.Elem()
	}
	if s, ok := v.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return `""`
		}
		return v.String()
	case reflect.Slice:
		if v.Len() == 0 {
			return "[]"
		}
		return fmt.Sprint(v.Interface())
	case reflect.Map:
		if v.Len() == 0 {
			return "{}"
		}
	}
	return fmt.Sprint(v.Interface())
}

// schemaDefaults are the documented defaults: defaults() before Complete (the
// derived keys stay empty), and for auth-plugins[] an authorizer's.
func schemaDefaults() map[string]string {
	c := defaults()
	p := AuthPlugin{Kind: AuthPluginAuthorizer}.withDefaults()
	out := map[string]string{}
	for _, k := range schemaKeys() {
		out[k.name] = docDefault(k.value(c, &p))
	}
	// The kind of a plugin has no default.
	out["auth-plugins[].kind"] = `""`
	return out
}

// flagKeys maps each config flag to the key it sets, found by setting the flag
// and seeing which field changed.
func flagKeys(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	newFlagSet(defaults(), &cli{}).VisitAll(func(f *flag.Flag) {
		switch f.Name {
		case "config", "config-file", "version":
			return
		}
		before := defaults()
		var p AuthPlugin
		for _, val := range []string{"7", "7s", "x,y", "true", "false"} {
			c := defaults()
			fs := newFlagSet(c, &cli{})
			if fs.Set(f.Name, val) != nil {
				continue
			}
			var changed []string
			for _, k := range schemaKeys() {
				if !k.inList && !reflect.DeepEqual(k.value(before, &p).Interface(), k.value(c, &p).Interface()) {
					changed = append(changed, k.name)
				}
			}
			if len(changed) > 1 {
				t.Errorf("--%s=%s sets %v", f.Name, val, changed)
			}
			if len(changed) == 1 {
				out[f.Name] = changed[0]
				return
			}
		}
		t.Errorf("--%s sets no key", f.Name)
	})
	return out
}

// docRow is one row of a key table in configuration.md.
type docRow struct {
	line                   int
	key, flags, def, means string
}

var backticked = regexp.MustCompile("`([^`]*)`")

// docTables reads the tables of configuration.md whose header is hdr.
func docTables(t *testing.T, hdr string) []docRow {
	t.Helper()
	data, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	var rows []docRow
	in := false
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == hdr:
			in = true
		case !strings.HasPrefix(line, "|"):
			in = false
		case in && !strings.HasPrefix(line, "| ---") && !strings.HasPrefix(line, "|---"):
			cells := strings.Split(strings.Trim(line, "|"), " | ")
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			if len(cells) != 4 {
				t.Errorf("%s:%d: want 4 cells, got %d: %s", docPath, i+1, len(cells), line)
				continue
			}
			m := backticked.FindStringSubmatch(cells[0])
			if m == nil {
				t.Errorf("%s:%d: the key is not `quoted`: %s", docPath, i+1, line)
				continue
			}
			rows = append(rows, docRow{line: i + 1, key: m[1], flags: cells[1], def: cells[2], means: cells[3]})
		}
	}
	return rows
}

const keyTableHeader = "| key | flag | default | meaning |"

// configuration.md documents every key of the schema, once, with its flags
// and default, and no key the schema lacks.
func TestConfigurationDoc(t *testing.T) {
	rows := docTables(t, keyTableHeader)
	defs := schemaDefaults()
	flags := map[string][]string{}
	for f, k := range flagKeys(t) {
		flags[k] = append(flags[k], "--"+f)
	}
	seen := map[string]int{}
	for _, r := range rows {
		if l, dup := seen[r.key]; dup {
			t.Errorf("%s:%d: %s documented twice (first at line %d)", docPath, r.line, r.key, l)
			continue
		}
		seen[r.key] = r.line
		def, ok := defs[r.key]
		if !ok {
			t.Errorf("%s:%d: %s is not a key of the config schema", docPath, r.line, r.key)
			continue
		}
		if m := backticked.FindStringSubmatch(r.def); m == nil || m[1] != def {
			t.Errorf("%s:%d: %s: default cell %q, want it to start with `%s`", docPath, r.line, r.key, r.def, def)
		}
		var got []string
		for _, m := range backticked.FindAllStringSubmatch(r.flags, -1) {
			got = append(got, m[1])
		}
		want := flags[r.key]
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) || (len(want) == 0 && r.flags != "—") {
			t.Errorf("%s:%d: %s: flag cell %q, want %q (— when none)", docPath, r.line, r.key, r.flags, want)
		}
		if r.means == "" {
			t.Errorf("%s:%d: %s: no meaning", docPath, r.line, r.key)
		}
	}
	for _, k := range schemaKeys() {
		if _, ok := seen[k.name]; !ok {
			t.Errorf("%s: key %s (default `%s`, flags %q) is not documented", docPath, k.name, defs[k.name], flags[k.name])
		}
	}
}

// The feature gates table lists etcd's gates with their defaults and whether
// kvd refuses them.
func TestConfigurationDocFeatureGates(t *testing.T) {
	rows := docTables(t, "| gate | etcd default | in kvd | meaning |")
	seen := map[string]bool{}
	for _, r := range rows {
		def, ok := etcdFeatureGates[r.key]
		if !ok {
			t.Errorf("%s:%d: %s is not an etcd feature gate", docPath, r.line, r.key)
			continue
		}
		seen[r.key] = true
		if r.flags != fmt.Sprintf("`%v`", def) {
			t.Errorf("%s:%d: %s: default %s, want `%v`", docPath, r.line, r.key, r.flags, def)
		}
		_, refused := unsupportedFeatureGates[r.key]
		if strings.Contains(r.def, "refused") != refused {
			t.Errorf("%s:%d: %s: status %q, refused is %v", docPath, r.line, r.key, r.def, refused)
		}
	}
	for g := range etcdFeatureGates {
		if !seen[g] {
			t.Errorf("%s: feature gate %s is not documented", docPath, g)
		}
	}
}
