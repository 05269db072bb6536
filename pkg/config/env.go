package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// environ is os.Environ, replaced in tests.
var environ = os.Environ

// checkEtcdEnv refuses etcd's environment spelling of kvd's flags
// (ETCD_DATA_DIR for --data-dir): kvd does not read them, and a member
// started with ETCD_NAME=n1 must not quietly come up as "default".
func checkEtcdEnv(fs *flag.FlagSet) error {
	names := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "version" { // ETCD_VERSION often names an image's etcd release
			return
		}
		names["ETCD_"+strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))] = f.Name
	})
	var errs []string
	for _, kv := range environ() {
		k, _, _ := strings.Cut(kv, "=")
		if f, ok := names[k]; ok {
			errs = append(errs, fmt.Sprintf("environment variable %s: kvd does not support etcd's ETCD_* variables; give --%s (or its config file key) instead", k, f))
		}
	}
	sort.Strings(errs)
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "\n"))
}
