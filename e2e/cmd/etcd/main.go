// Command etcd is etcd v3.7.3's server, built from the module graph so that
// the e2e suite can run a reference member beside kvd.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
