package storageagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/internal/placement/wire"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

// TestServeNeverSendsCanary serves a directory full of symlinks to the
// canary, swaps a file for one after start, and checks that the catalog
// can be read and no response carries the canary.
func TestServeNeverSendsCanary(t *testing.T) {
	e := datasettest.NewEnv(t, "folder")
	datasettest.Symlink(t, e.Canary, e.P("good/evil.jpg"))
	datasettest.Symlink(t, "/etc/passwd", e.P("good/passwd.jpg"))
	datasettest.Symlink(t, filepath.Join(e.Outside, "cls"), e.P("evil"))
	datasettest.Symlink(t, filepath.Join(e.Outside, "cls"), e.P("good/sub"))
	datasettest.WriteFile(t, e.P("cl\xe9/x.jpg"), e.Img)
	cfg := DefaultConfig()
	cfg.Data, cfg.Listen, cfg.CPUs, cfg.Index, cfg.Insecure = e.Dir, "", 1, "-", true
	a := startAgent(t, cfg)
	// Swap after start.
	datasettest.Must(t, os.Remove(e.P("good/a.jpg")))
	datasettest.Symlink(t, e.Canary, e.P("good/a.jpg"))

	stream, err := a.client.Catalog(context.Background(), &dataplanepb.CatalogRequest{})
	datasettest.Must(t, err)
	page, err := stream.Recv()
	if err != nil {
		t.Fatalf("catalog with a non-UTF-8 class: %v", err)
	}
	if len(page.ContentHashes) != 32*len(page.Labels) {
		t.Errorf("%d bytes of hashes for %d samples", len(page.ContentHashes), len(page.Labels))
	}
	n := a.Dataset().Len()
	var reqs []*dataplanepb.FetchRequest
	for i := range n {
		reqs = append(reqs, &dataplanepb.FetchRequest{Tag: i, Sample: i})
	}
	failed := 0
	for _, r := range fetchAll(t, a.client, reqs) {
		if bytes.Contains(r.Data, []byte(datasettest.CanaryMark)) {
			t.Fatalf("sample %d served the canary", r.Sample)
		}
		if r.Error != nil {
			failed++
			if r.Error.Kind != dataplanepb.ErrorKind_ERROR_KIND_IO || !strings.Contains(r.Error.Message, "good/a.jpg") {
				t.Errorf("sample %d: %v, want an IO error naming good/a.jpg", r.Sample, r.Error)
			}
		}
	}
	if failed != 1 {
		t.Errorf("%d samples failed, want 1 (the swapped one)", failed)
	}
}

// TestInfoMissingShards: an agent started from a manifest with part of the
// files announces its missing shards in Info and never holds them, and a
// compute agent's decoder accepts the announcement.
func TestInfoMissingShards(t *testing.T) {
	full := openDataset(t, datasettest.TarShards(t))
	man := filepath.Join(t.TempDir(), "manifest")
	datasettest.WriteFile(t, man, full.Manifest().Encode())
	cfg := testConfig(t)
	cfg.Data = datasettest.TarShards(t, 1, 2)
	cfg.Manifest = man
	cfg.Replicas = 0 // every shard it stores
	a := startAgent(t, cfg)
	info, err := a.client.Info(context.Background(), &dataplanepb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	l, held, err := wire.DecodePlacement(info)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := wire.DecodeMissing(info, l, held)
	if err != nil {
		t.Fatal(err)
	}
	if info.GetFingerprint() != full.Fingerprint() || !slices.Equal(held, []int{1, 2}) || !slices.Equal(missing, []int{0, 3}) {
		t.Errorf("Info: fingerprint %s held %v missing %v; want %s, [1 2], [0 3]", info.GetFingerprint(), held, missing, full.Fingerprint())
	}
	for name, want := range map[string]string{"sophon_storage_shards": "4", "sophon_storage_held_shards": "2", "sophon_storage_missing_shards": "2"} {
		if got := metricValue(t, a.Agent, name); got != want {
			t.Errorf("%s: got %s, want %s", name, got, want)
		}
	}
	id := preset(t, "imagenet-train").ID()
	resp := fetchAll(t, a.client, []*dataplanepb.FetchRequest{{Tag: 1, Sample: 0, PipelineId: id}, {Tag: 2, Sample: 4, PipelineId: id}})
	if k := resp[1].GetError().GetKind(); k != dataplanepb.ErrorKind_ERROR_KIND_NOT_FOUND {
		t.Errorf("a sample of a missing shard: %v, want NOT_FOUND", resp[1].GetError())
	}
	if resp[2].GetError() != nil {
		t.Errorf("a stored sample: %v", resp[2].GetError())
	}
}

// openDataset opens dir without an index file until the test ends.
func openDataset(t *testing.T, dir string) *dataset.Dataset {
	t.Helper()
	d, err := dataset.OpenWith(dir, dataset.OpenOptions{Index: "-"})
	if err != nil {
		t.Fatalf("OpenWith(%s): %v", dir, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestDatasetErrorKinds: the dataset's read errors reach clients as the
// error kinds they stand for.
func TestDatasetErrorKinds(t *testing.T) {
	d := openDataset(t, datasettest.ImageFolder(t, []string{"a"}, 2))
	datasettest.Must(t, os.Remove(filepath.Join(d.Dir(), "a", "imgb.jpg")))
	_, err := d.Read(1)
	if got := errorKind(err); got != dataplanepb.ErrorKind_ERROR_KIND_IO {
		t.Errorf("a removed file: %v gives %v, want IO", err, got)
	}
	full := openDataset(t, datasettest.TarShards(t))
	man := filepath.Join(t.TempDir(), "manifest")
	datasettest.WriteFile(t, man, full.Manifest().Encode())
	m, err := dataset.ReadManifest(man)
	datasettest.Must(t, err)
	part, err := dataset.OpenWith(datasettest.TarShards(t, 1), dataset.OpenOptions{Index: "-", Manifest: m})
	datasettest.Must(t, err)
	defer part.Close()
	_, err = part.Read(0)
	if got := errorKind(err); !errors.Is(err, dataset.ErrNotStored) || got != dataplanepb.ErrorKind_ERROR_KIND_NOT_FOUND {
		t.Errorf("a sample stored elsewhere: %v gives %v, want ErrNotStored as NOT_FOUND", err, got)
	}
	if got := errorKind(fmt.Errorf("wrapped: %w", dataset.ErrClosed)); got != dataplanepb.ErrorKind_ERROR_KIND_IO {
		t.Errorf("a closed dataset gives %v, want IO", got)
	}
}
