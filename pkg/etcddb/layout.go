// Package etcddb converts between kvd's backend layout and etcd's bolt
// file, the format of etcd's snapshots (etcdctl snapshot save) and of its
// member/snap/db: Export writes what a kvd backend holds as etcd v3.7 would
// have written it, Import loads an etcd file into a kvd backend of either
// engine, and ReadStatus reads a file as etcdutl snapshot status does.
//
// The two layouts share the revision, lease and alarm records byte for
// byte; they differ in where members and auth records live and in a few
// meta keys:
//
//	etcd bucket/key                  kvd bucket/key
//	key/<rev>                        key/<rev>
//	lease/<id>                       lease/<id>
//	alarm/<member alarm>             alarm/<member alarm>
//	meta/consistent_index            meta/consistent_index
//	meta/term                        meta/consistent_term
//	meta/scheduledCompactRev         meta/scheduledCompactRev
//	meta/finishedCompactRev          meta/finishedCompactRev
//	meta/confState, storageVersion   (kvd derives them)
//	cluster/clusterVersion           (kvd derives it)
//	members/<id hex>                 members/m/<id %016x> (same JSON)
//	members_removed/<id hex>         members/r/<id %016x>
//	auth/authEnabled, authRevision   auth/enabled, auth/revision
//	authUsers/<name>                 auth/user/<name> (same authpb.User)
//	authRoles/<name>                 auth/role/<name> (same authpb.Role)
package etcddb

// Bucket names of etcd's schema (server/storage/schema/bucket.go).
const (
	bucketKey            = "key"
	bucketMeta           = "meta"
	bucketLease          = "lease"
	bucketAlarm          = "alarm"
	bucketCluster        = "cluster"
	bucketMembers        = "members"
	bucketMembersRemoved = "members_removed"
	bucketAuth           = "auth"
	bucketAuthUsers      = "authUsers"
	bucketAuthRoles      = "authRoles"
)

// etcdBuckets are the buckets etcd v3.7 creates, all present in its files.
var etcdBuckets = []string{bucketKey, bucketMeta, bucketLease, bucketAlarm, bucketCluster,
	bucketMembers, bucketMembersRemoved, bucketAuth, bucketAuthUsers, bucketAuthRoles}

// Keys of etcd's meta, auth and cluster buckets.
const (
	etcdMetaConsistentIndex = "consistent_index"
	etcdMetaTerm            = "term"
	etcdMetaConfState       = "confState"
	etcdMetaStorageVersion  = "storageVersion"
	etcdAuthEnabled         = "authEnabled"
	etcdAuthRevision        = "authRevision"
	etcdClusterVersion      = "clusterVersion"
)

// StorageVersion is the storage schema version kvd's files claim: etcd
// v3.7's, whose layout Export writes. etcd v3.6 and v3.7 read it.
const StorageVersion = "3.7.0"

// removedValue is what etcd stores for a removed member.
var removedValue = []byte("removed")
