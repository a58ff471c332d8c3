package storageagent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

// inode is name's inode number.
func inode(t *testing.T, name string) uint64 {
	t.Helper()
	fi, err := os.Stat(name)
	datasettest.Must(t, err)
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestServeVerifiesContent: a sample whose bytes change after indexing
// while its (device, inode, size) do not (another valid JPEG of the same
// size written in place, or the file deleted and re-created with the same
// size) fails at every split, raw, each k in 1..n and the cut, with an IO
// error naming the sample and the file (dataset.ErrChanged), and the other
// samples are served as before.
func TestServeVerifiesContent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout string
		change func(t *testing.T, dir, rel string, orig []byte)
	}{
		{"overwritten in place", "folder", func(t *testing.T, dir, rel string, orig []byte) {
			name := filepath.Join(dir, rel)
			ino := inode(t, name)
			datasettest.OverwriteAt(t, name, 0, datasettest.SameSizeJPEG(t, orig))
			if inode(t, name) != ino {
				t.Fatal("the inode changed on an in-place write")
			}
		}},
		{"deleted and re-created", "folder", func(t *testing.T, dir, rel string, orig []byte) {
			name := filepath.Join(dir, rel)
			ino := inode(t, name)
			datasettest.Must(t, os.Remove(name))
			datasettest.WriteFile(t, name, datasettest.SameSizeJPEG(t, orig))
			t.Logf("inode reused: %v", inode(t, name) == ino)
		}},
		{"shard member overwritten in place", "tar", func(t *testing.T, dir, rel string, orig []byte) {
			shard := filepath.Join(dir, rel[:strings.IndexByte(rel, '/')])
			b, err := os.ReadFile(shard)
			datasettest.Must(t, err)
			datasettest.OverwriteAt(t, shard, int64(bytes.Index(b, orig)), datasettest.SameSizeJPEG(t, orig))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			if tc.layout == "tar" {
				cfg.Data = datasettest.TarShards(t)
			}
			a := startAgent(t, cfg)
			ds := a.Dataset()
			const victim = 1
			rel := ds.Path(victim)
			orig, err := ds.Read(victim)
			datasettest.Must(t, err)
			tc.change(t, cfg.Data, rel, orig)
			if _, err := ds.Read(victim); !errors.Is(err, dataset.ErrChanged) {
				t.Fatalf("Read after the change: %v, want ErrChanged", err)
			}
			checkVictim(t, a, victim, rel)
			checkOthers(t, a, victim)
		})
	}
}

// fetchAtEverySplit asks for sample i raw, at every split of imagenet-train
// and cut.
func fetchAtEverySplit(p *ops.Pipeline, i uint64) []*dataplanepb.FetchRequest {
	reqs := []*dataplanepb.FetchRequest{{Sample: i, PipelineId: p.ID(), Cut: true}}
	for k := range p.Len() + 1 {
		reqs = append(reqs, &dataplanepb.FetchRequest{Sample: i, Split: uint32(k), PipelineId: p.ID()})
	}
	for j, r := range reqs {
		r.Tag, r.Seed = uint64(j), 3
	}
	return reqs
}

// checkVictim: every fetch of the changed sample fails naming it.
func checkVictim(t *testing.T, a *testAgent, i uint64, rel string) {
	p := preset(t, "imagenet-train")
	reqs := fetchAtEverySplit(p, i)
	got := fetchAll(t, a.client, reqs)
	for _, r := range reqs {
		e := got[r.Tag].GetError()
		what := fmt.Sprintf("split %d (cut %v)", r.Split, r.Cut)
		if e == nil {
			t.Errorf("%s: served %v, want an error", what, got[r.Tag].Served)
			continue
		}
		if e.Kind != dataplanepb.ErrorKind_ERROR_KIND_IO || !strings.Contains(e.Message, rel) ||
			!strings.Contains(e.Message, fmt.Sprintf("sample %d ", i)) || !strings.Contains(e.Message, dataset.ErrChanged.Error()) {
			t.Errorf("%s: %v %q, want IO naming sample %d, %s and ErrChanged", what, e.Kind, e.Message, i, rel)
		}
	}
}

// checkOthers: the other samples are served raw as read and, at the last
// split, as a local run gives.
func checkOthers(t *testing.T, a *testAgent, victim uint64) {
	p := preset(t, "imagenet-train")
	ds := a.Dataset()
	var reqs []*dataplanepb.FetchRequest
	for i := range ds.Len() {
		if i != victim && !strings.HasPrefix(filepath.Base(ds.Path(i)), "zz_") { // not the bad files
			reqs = append(reqs, &dataplanepb.FetchRequest{Tag: 2 * i, Sample: i, Seed: 3},
				&dataplanepb.FetchRequest{Tag: 2*i + 1, Sample: i, Seed: 3, Split: uint32(p.Len()), PipelineId: p.ID()})
		}
	}
	got := fetchAll(t, a.client, reqs)
	for _, r := range reqs {
		resp := got[r.Tag]
		if resp.Error != nil {
			t.Fatalf("sample %d split %d: %v", r.Sample, r.Split, resp.Error)
		}
		raw, err := ds.Read(r.Sample)
		datasettest.Must(t, err)
		want := wireBytes(t, ops.Encoded(raw))
		if r.Split > 0 {
			v, err := p.Run(ops.Key{Seed: 3, Sample: r.Sample}, ops.Encoded(raw), 0, p.Len())
			datasettest.Must(t, err)
			want = wireBytes(t, v)
		}
		mid, err := wireform.Decode(resp.Data, wireform.Limits{})
		datasettest.Must(t, err)
		if !bytes.Equal(wireBytes(t, mid), want) {
			t.Errorf("sample %d split %d: not the bytes of a local run", r.Sample, r.Split)
		}
	}
}
