package e2e

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// etcdctlLeaseScript runs after leases 0x1234 (TTL 600) and 0x99 (TTL 300)
// were granted with explicit IDs; remaining TTLs and server-chosen IDs are
// masked (see maskLeaseOutput).
var etcdctlLeaseScript = []ctlCmd{
	ctl("lease", "grant", "100"),
	ctl("lease", "grant", "1"),
	ctl("lease", "grant", "9000000001"),
	ctl("put", "svc/a", "1", "--lease", "1234"),
	ctl("put", "svc/b", "2", "--lease", "1234"),
	ctl("put", "svc/c", "3", "--lease", "99"),
	ctl("put", "svc/d", "4", "--lease", "4321"),
	ctl("put", "svc/c", "5", "--ignore-lease"),
	ctl("get", "svc/", "--prefix", "-w", "json"),
	ctl("lease", "timetolive", "1234"),
	ctl("lease", "timetolive", "1234", "--keys"),
	ctl("lease", "timetolive", "99", "--keys", "-w", "json"),
	ctl("lease", "timetolive", "4321"),
	ctl("lease", "timetolive", "4321", "-w", "json"),
	ctl("lease", "keep-alive", "--once", "1234"),
	ctl("lease", "keep-alive", "--once", "4321"),
	ctl("lease", "revoke", "1234"),
	ctl("lease", "revoke", "1234"),
	ctl("get", "svc/", "--prefix"),
	ctl("lease", "timetolive", "1234"),
	ctl("lease", "revoke", "99", "-w", "json"),
	ctl("get", "svc/", "--prefix", "-w", "json"),
}

var (
	leaseRemaining = regexp.MustCompile(`remaining\([1-9]\d*s\)`)
	leaseTTLJSON   = regexp.MustCompile(`"ttl":[1-9]\d*`)
	leaseGranted   = regexp.MustCompile(`lease [0-9a-f]+ granted`)
	leaseListed    = regexp.MustCompile(`(?m)^[0-9a-f]{16}$`)
	leaseKeys      = regexp.MustCompile(`attached keys\(\[([^\]]*)\]\)`)
)

// maskLeaseOutput hides what depends on time or on server-chosen IDs, and
// sorts attached keys (etcd lists them in map order).
func maskLeaseOutput(s string) string {
	s = leaseKeys.ReplaceAllStringFunc(s, func(m string) string {
		keys := strings.Fields(leaseKeys.FindStringSubmatch(m)[1])
		slices.Sort(keys)
		return "attached keys([" + strings.Join(keys, " ") + "])"
	})
	s = leaseRemaining.ReplaceAllString(s, "remaining(<ttl>)")
	s = leaseTTLJSON.ReplaceAllString(s, `"ttl":<ttl>`)
	s = leaseGranted.ReplaceAllString(s, "lease <id> granted")
	return leaseListed.ReplaceAllString(s, "<id>")
}

func TestEtcdctlLease(t *testing.T) {
	bin := harness.EtcdctlBinary(t)
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			ref := newCtlTarget(t, harness.StartEtcd(t, harness.Options{}))
			sut := newCtlTarget(t, harness.StartKVD(t, harness.Options{Engine: engine}))
			for _, tg := range []*ctlTarget{ref, sut} {
				lc := pb.NewLeaseClient(tg.proc.Client(t).ActiveConnection())
				for _, g := range []*pb.LeaseGrantRequest{{ID: 0x1234, TTL: 600}, {ID: 0x99, TTL: 300}} {
					_, err := lc.LeaseGrant(testCtx(t), g)
					mustOK(t, "grant", err)
				}
			}
			for i, c := range etcdctlLeaseScript {
				want, got := ref.run(bin, c), sut.run(bin, c)
				want.stdout, got.stdout = maskLeaseOutput(want.stdout), maskLeaseOutput(got.stdout)
				if got != want {
					t.Errorf("command %d: etcdctl %s: outputs differ\n=== etcd:\n%v=== %s:\n%v",
						i, strings.Join(c.args, " "), want, sut.proc.Label(), got)
				}
			}
		})
	}
}
