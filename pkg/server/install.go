package server

import (
	"github.com/kvd-dev/kvd/pkg/alarms"
	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/watchhub"
)

// reloadFromStore makes what is kept beside the store follow a backend a
// leader's snapshot replaced: the member list, leases, auth, alarms, and
// the watchers, which resync from the new revisions.
func reloadFromStore(st *mvcc.Store, cl *membership.Cluster, leases *leasemgr.Manager, auth *authz.Store, al *alarms.Store, hub *watchhub.Hub) error {
	var ld membership.Loader
	if err := st.Members(ld.Add); err != nil {
		return err
	}
	ld.RestoreInto(cl)
	if leases != nil {
		if err := leases.Reload(st); err != nil {
			return err
		}
	}
	if err := auth.Load(st.AuthRecords); err != nil {
		return err
	}
	if al != nil {
		if err := al.Load(st.AlarmRecords); err != nil {
			return err
		}
	}
	hub.Resync()
	return nil
}
