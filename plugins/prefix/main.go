// Command prefix is a kvd authorizer plugin for multi-tenant use: a user
// may touch only the keys under ROOT + user + "/" (by default
// "/tenants/alice/" for alice). kvd's root user, and any user with the
// root role, is exempt. It only vetoes: kvd's roles still apply.
//
//	prefix [--root /tenants/]
package main

import (
	"flag"
	"os"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
)

func main() {
	fs := flag.NewFlagSet("prefix", flag.ExitOnError)
	root := fs.String("root", "/tenants/", "the `PREFIX` under which each user has its own PREFIX<user>/")
	_ = fs.Parse(os.Args[1:]) // ExitOnError: never returns an error

	pluginsdk.ServeAuthorizer(authorizer{root: *root})
}
