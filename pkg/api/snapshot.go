package api

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/etcddb"
)

// SnapshotFilePattern names the files Snapshot builds in
// Config.SnapshotDir; a member removes leftovers at start.
const SnapshotFilePattern = "snapshot-export-*.db"

// Snapshot streams the backend as etcd's bolt file, whatever the engine,
// then its sha256 as a last blob, as etcd does: etcdctl snapshot save
// checks the checksum, and etcdutl snapshot status/restore and etcd itself
// read the file. The file is built from one read view (after the write-back
// buffer is flushed, so it holds every acknowledged write) into a temporary
// file, then sent; the temporary file is removed whatever happens.
func (m *maintenanceServer) Snapshot(_ *pb.SnapshotRequest, stream grpc.ServerStreamingServer[pb.SnapshotResponse]) error {
	s := m.s
	if d := s.SnapshotDuration; d != nil {
		start := time.Now()
		defer func() { d.Observe(time.Since(start).Seconds()) }()
	}
	if err := s.Store.Flush(); err != nil {
		return status.Errorf(codes.Internal, "etcdserver: snapshot: %v", err)
	}
	path, err := m.export()
	if err != nil {
		return status.Errorf(codes.Internal, "etcdserver: snapshot: %v", err)
	}
	defer os.Remove(path)
	f, err := os.Open(path)
	if err != nil {
		return status.Errorf(codes.Internal, "etcdserver: snapshot: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return status.Errorf(codes.Internal, "etcdserver: snapshot: %v", err)
	}
	total := uint64(fi.Size())
	var sent uint64
	h := sha256.New()
	buf := make([]byte, 32*1024)
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			h.Write(buf[:n])
			sent += uint64(n)
			resp := &pb.SnapshotResponse{
				RemainingBytes: total - min(sent, total),
				Blob:           append([]byte(nil), buf[:n]...),
				Version:        storageVersion,
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			if sent != total {
				return status.Errorf(codes.Internal, "etcdserver: snapshot: read %d of %d bytes", sent, total)
			}
			return stream.Send(&pb.SnapshotResponse{RemainingBytes: 0, Blob: h.Sum(nil), Version: storageVersion})
		}
		if err != nil {
			return status.Errorf(codes.Internal, "etcdserver: snapshot: %v", err)
		}
	}
}

// export writes the backend's current state to a new etcd-format file.
func (m *maintenanceServer) export() (string, error) {
	dir := m.s.cfg.SnapshotDir
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, SnapshotFilePattern)
	if err != nil {
		return "", err
	}
	path := f.Name()
	f.Close()
	os.Remove(path) // Export creates it exclusively
	err = m.s.Store.WholeView(func(be backend.Backend) error { return etcddb.ExportBackend(be, path) })
	if err != nil {
		return "", fmt.Errorf("build %s: %w", filepath.Base(path), err)
	}
	return path, nil
}
