package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzDecode feeds fuzzed YAML to the config file decoder. It must return an
// error or a config, never panic; a config it returns must complete and
// validate (to nil or an error) without panicking, and decoding the same
// bytes again must give the same config.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("../../configs/*.yaml")
	more, _ := filepath.Glob("../../configs/*/*.yaml")
	for _, p := range append(files, more...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"---\n",
		"name: a\nname: b\n",
		"snapshot-count: [1, 2]\n",
		"heartbeat-interval: 100ms\nelection-timeout: 1s\n",
		"listen-client-urls: http://127.0.0.1:2379,http://[::1]:2379\n",
		"backend:\n  engine: badger\n  bolt:\n    initial-mmap-size: 1\n",
		"a: &x {b: *x}\n",
		"auth-plugins:\n- name: p\n  path: /bin/true\n",
		"a: 1\n---\nb: 2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := defaults()
		if err := c.decode(data); err != nil {
			return
		}
		c2 := defaults()
		if err := c2.decode(data); err != nil {
			t.Fatalf("second decode failed: %v", err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("decoding the same bytes twice gave different configs")
		}
		c.Complete()
		_ = c.Validate()
	})
}
