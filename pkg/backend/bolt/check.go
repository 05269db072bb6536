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

// CheckReadable is the part of CheckFile a reader needs: the extent and
// the page tree of the meta page bolt will use (every element inside its
// page, children below the high-water mark, keys in order), without bolt's
// own consistency check of the freelist, which walks the whole file again.
// Tools that only read the file (an import) call it.
func CheckReadable(path string) error {
	if err := checkExtent(path); err != nil {
		return err
	}
	return checkPages(path)
}
