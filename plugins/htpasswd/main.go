// Command htpasswd is a kvd authenticator plugin that checks user names and
// passwords against an Apache htpasswd file (bcrypt entries only) and takes
// the users' groups, which become kvd roles, from an optional Apache group
// file. Both files are re-read when they change.
//
//	htpasswd --file /etc/kvd/htpasswd [--groups /etc/kvd/groups]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
)

func main() {
	fs := flag.NewFlagSet("htpasswd", flag.ExitOnError)
	file := fs.String("file", "", "Apache htpasswd `FILE` (bcrypt entries only; required)")
	groups := fs.String("groups", "", "Apache group `FILE` (\"group: user1 user2\" lines; optional)")
	_ = fs.Parse(os.Args[1:]) // ExitOnError: never returns an error

	if *file == "" {
		fmt.Fprintln(os.Stderr, "htpasswd: --file is required")
		os.Exit(2)
	}
	a, err := newAuthenticator(*file, *groups, reloadInterval, pluginsdk.Logger())
	if err != nil {
		// Before Serve: kvd shows this and the exit status as the reason
		// the plugin did not start.
		fmt.Fprintln(os.Stderr, "htpasswd:", err)
		os.Exit(1)
	}
	pluginsdk.ServeAuthenticator(a)
}
