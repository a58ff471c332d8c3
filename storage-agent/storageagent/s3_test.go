package storageagent

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
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

// stallingS3 is an S3 server on loopback whose bucket "bkt" holds two
// JPEG keys below the prefix "p/", one a list page: the listing's check
// is request 1, its first page 2 and its second 3. It stalls the request
// numbered stallAt, or every GET of an object with stallAt 0; a stalled
// request is announced on stalled and waits for its client to go.
type stallingS3 struct {
	srv      *httptest.Server
	requests atomic.Int64
	stalled  chan string
	gone     chan struct{}
	once     sync.Once
}

func newStallingS3(t *testing.T, stallAt int64, jpeg []byte) *stallingS3 {
	s := &stallingS3{stalled: make(chan string, 100), gone: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.requests.Add(1)
		list := r.URL.Query().Get("list-type") == "2"
		if n == stallAt || (stallAt == 0 && !list) {
			s.stalled <- fmt.Sprintf("request %d %s", n, r.URL)
			select {
			case <-r.Context().Done():
			case <-s.gone:
			}
			return
		}
		if !list {
			w.Header().Set("ETag", `"e1"`)
			w.Header().Set("Last-Modified", "Tue, 02 Jan 2024 03:04:05 GMT")
			w.Write(jpeg)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		next, key := "<IsTruncated>true</IsTruncated><NextContinuationToken>t1</NextContinuationToken>", "x"
		if r.URL.Query().Get("continuation-token") == "t1" {
			next, key = "<IsTruncated>false</IsTruncated>", "y"
		}
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bkt</Name><Prefix>p/</Prefix>%s`+
			`<Contents><Key>p/c/%s.jpg</Key><LastModified>2024-01-02T03:04:05.000Z</LastModified><ETag>"e1"</ETag><Size>%d</Size></Contents></ListBucketResult>`, next, key, len(jpeg))
	}))
	t.Cleanup(func() {
		s.once.Do(func() { close(s.gone) })
		s.srv.Close()
	})
	return s
}
