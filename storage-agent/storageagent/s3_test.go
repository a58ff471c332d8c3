package storageagent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/sophon-dl/sophon/internal/s3gw/s3gwtest"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
	"github.com/sophon-dl/sophon/storage-agent/dataset/s3src"
)

// TestServeFromBucket: an agent serving s3://data/ds from a real S3 server
// (versitygw, whose bucket "data" is a folder) has the catalog and
// fingerprint of an agent serving the same folder, and serves the same
// bytes for every sample at every split of imagenet-train and the cut,
// bad samples' errors included; for an ImageFolder and for tar shards.
func TestServeFromBucket(t *testing.T) {
	for _, layout := range []string{"folder", "tar"} {
		t.Run(layout, func(t *testing.T) {
			root := t.TempDir()
			datasettest.Must(t, os.MkdirAll(filepath.Join(root, "data"), 0o755))
			src := testData(t)
			if layout == "tar" {
				src = datasettest.TarShards(t)
			}
			dir := filepath.Join(root, "data", "ds")
			datasettest.Must(t, os.Rename(src, dir))
			srv := s3gwtest.Start(t, root, "sa-test", "sa-test-secret")

			fromDir := testConfig(t)
			fromDir.Data, fromDir.Index = dir, "-"
			fromBucket := testConfig(t)
			fromBucket.Data, fromBucket.Index = "s3://data/ds", "-"
			fromBucket.S3 = s3src.Config{Endpoint: srv.URL, Region: "us-east-1", Creds: credentials.NewStaticV4("sa-test", "sa-test-secret", "")}
			a, b := startAgent(t, fromDir), startAgent(t, fromBucket)
			ia, err := a.client.Info(context.Background(), &dataplanepb.InfoRequest{})
			datasettest.Must(t, err)
			ib, err := b.client.Info(context.Background(), &dataplanepb.InfoRequest{})
			datasettest.Must(t, err)
			if ia.Fingerprint != ib.Fingerprint || ia.Samples != ib.Samples {
				t.Fatalf("bucket: %d samples, fingerprint %s; folder: %d, %s", ib.Samples, ib.Fingerprint, ia.Samples, ia.Fingerprint)
			}
			p := preset(t, "imagenet-train")
			var reqs []*dataplanepb.FetchRequest
			for i := range ia.Samples {
				for _, r := range fetchAtEverySplit(p, i) {
					r.Tag += i * 100
					reqs = append(reqs, r)
				}
			}
			ga, gb := fetchAll(t, a.client, reqs), fetchAll(t, b.client, reqs)
			for _, r := range reqs {
				ra, rb := ga[r.Tag], gb[r.Tag]
				if !bytes.Equal(ra.Data, rb.Data) || ra.GetError().GetKind() != rb.GetError().GetKind() {
					t.Errorf("sample %d split %d cut %v: bucket and folder differ (errors %v, %v)", r.Sample, r.Split, r.Cut, rb.GetError(), ra.GetError())
				}
			}
		})
	}
}
