package server

import "testing"

// The expected IDs are what etcd v3.7.3 prints for the same flags
// (etcd --name default with its default peer URL and token).
func TestIDsMatchEtcd(t *testing.T) {
	id := MemberID([]string{"http://localhost:2380"}, "etcd-cluster")
	if id != 0x8e9e05c52164694d {
		t.Fatalf("member id = %x, want 8e9e05c52164694d", id)
	}
	if cid := ClusterID([]uint64{id}); cid != 0xcdf818194e3a8c32 {
		t.Fatalf("cluster id = %x, want cdf818194e3a8c32", cid)
	}
}
