package entrybatch

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

func encode(t *testing.T, reqs ...*pb.InternalRaftRequest) ([]byte, [][]byte) {
	t.Helper()
	var datas [][]byte
	total := 0
	for _, r := range reqs {
		d, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		datas = append(datas, d)
		total += len(d)
	}
	b := Begin(make([]byte, 0, Size(len(datas), total)))
	for _, d := range datas {
		b = Append(b, d)
	}
	if len(b) > Size(len(datas), total) {
		t.Fatalf("batch of %d bytes, Size said %d", len(b), Size(len(datas), total))
	}
	return b, datas
}

func TestSplitReturnsTheRequestsInOrder(t *testing.T) {
	var reqs []*pb.InternalRaftRequest
	for i := 0; i < 50; i++ {
		reqs = append(reqs, &pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: uint64(i + 1)},
			Put: &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: bytes.Repeat([]byte{'v'}, i*40)}})
	}
	reqs = append(reqs, &pb.InternalRaftRequest{}) // an empty request encodes to no bytes
	b, datas := encode(t, reqs...)
	if !Is(b) {
		t.Fatal("Is(batch) = false")
	}
	for _, d := range datas {
		if Is(d) {
			t.Fatalf("Is(one request %x) = true", d)
		}
	}
	var got [][]byte
	if err := Split(b, func(d []byte) error { got = append(got, d); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(datas) {
		t.Fatalf("split %d requests, want %d", len(got), len(datas))
	}
	for i := range got {
		if !bytes.Equal(got[i], datas[i]) {
			t.Fatalf("request %d: %x, want %x", i, got[i], datas[i])
		}
	}
}

func TestBrokenBatchesApplyNothing(t *testing.T) {
	b, _ := encode(t, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a")}},
		&pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("b")}})
	bad := map[string][]byte{
		"truncated":       b[:len(b)-1],
		"unknown version": append([]byte{magic, 0x02}, b[2:]...),
		"bad length":      append(append([]byte{}, b...), 0xff),
		"not a batch":     b[1:],
	}
	for name, d := range bad {
		calls := 0
		err := Split(d, func([]byte) error { calls++; return nil })
		if err == nil || calls != 0 {
			t.Errorf("%s: Split = %v after %d calls, want an error and none", name, err, calls)
		}
	}
	stop := errors.New("stop")
	if err := Split(b, func([]byte) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("Split returned %v, want fn's error", err)
	}
}

// A build that reads every entry as one request must fail on a batch, not
// apply an empty request.
func TestBatchIsNotARequest(t *testing.T) {
	b, _ := encode(t, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a")}})
	if err := proto.Unmarshal(b, &pb.InternalRaftRequest{}); err == nil {
		t.Fatal("a batch decodes as an InternalRaftRequest")
	}
}
