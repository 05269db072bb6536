//go:build !linux

package bolt

// mmapFlags: MAP_POPULATE is Linux's; elsewhere the pages fault in on use.
const mmapFlags = 0
