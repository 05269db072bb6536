package config

import (
	"testing"
)

// etcd's ETCD_* spelling of a flag is refused, naming the variable and the
// flag, rather than ignored; other variables are none of kvd's business.
func TestEtcdEnvRefused(t *testing.T) {
	defer func(e func() []string) { environ = e }(environ)
	environ = func() []string {
		return []string{"PATH=/bin", "ETCD_BIN=/usr/bin/etcd", "ETCD_UNSUPPORTED_ARCH=arm", "ETCD_VERSION=3.7.3", "ETCD_DATA_DIR=/var/lib/etcd", "ETCD_NAME=n1"}
	}
	_, err := Parse(nil)
	wantErr(t, err, "ETCD_DATA_DIR", "--data-dir", "ETCD_NAME", "--name", "kvd does not support")
	environ = func() []string {
		return []string{"PATH=/bin", "ETCD_BIN=/usr/bin/etcd", "ETCD_UNSUPPORTED_ARCH=arm", "ETCD_VERSION=3.7.3"}
	}
	if _, err := Parse(nil); err != nil {
		t.Fatal(err)
	}
}
