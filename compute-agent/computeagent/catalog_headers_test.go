package computeagent

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// TestCatalogHeadersReal: the real storage agent's catalog carries each
// sample's JPEG header summary, and catalog.ReadCatalog exposes it: known
// for every JPEG of the set and equal to what the storage agent indexed.
func TestCatalogHeadersReal(t *testing.T) {
	dir := writeImageFolder(t, -1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := startStorage(t, storageagent.Config{Data: dir, Name: "st", CPUs: 1, Insecure: true}, storageagent.Knobs{}, lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cat, err := catalog.ReadCatalog(context.Background(), dataplanepb.NewStorageClient(conn))
	if err != nil {
		t.Fatal(err)
	}
	ds := a.Dataset()
	for i := range cat.Total {
		h, ok := cat.Header(i)
		if !ok || h != ds.Header(i) || h.Width() < 16 || h.Height() < 16 || h.Components() != 3 {
			t.Errorf("sample %d: Header = %v, %v; indexed %v", i, h, ok, ds.Header(i))
		}
	}
}
