package config

import "testing"

// etcd's quota-backend-bytes: 0 is the 2 GiB default, a negative value
// disables the quota (accepted, reported as is).
func TestQuotaBackendBytes(t *testing.T) {
	for _, tc := range []struct{ set, want int64 }{{0, 2 << 30}, {-1, -1}, {16 << 20, 16 << 20}, {10 << 30, 10 << 30}} {
		c := Default()
		c.QuotaBackendBytes = tc.set
		if err := c.Validate(); err != nil {
			t.Errorf("quota-backend-bytes %d: %v", tc.set, err)
		}
		if got := c.QuotaBytes(); got != tc.want {
			t.Errorf("quota-backend-bytes %d: QuotaBytes() = %d, want %d", tc.set, got, tc.want)
		}
	}
}
