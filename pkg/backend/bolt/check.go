package bolt

// CheckFile checks the bolt file at path as Restore checks a snapshot
// before it replaces anything: its extent, every page of its tree, and
// bolt's own consistency check, on a read-only open. Tools that read files
// from elsewhere (an etcd snapshot) call it before they trust one: a
// damaged page must be an error, not a crash of bolt's own goroutine.
func CheckFile(path string) error {
	bo, err := Options{}.withDefaults()
	if err != nil {
		return err
	}
	return checkFile(path, bo)
}
