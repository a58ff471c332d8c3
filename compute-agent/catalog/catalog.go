// Package catalog is the dataset as the storage agents serve it to a
// compute agent, and which of them may serve which sample: the catalog
// (ReadCatalog: sample count, fingerprint, labels, sizes, paths, JPEG
// headers and content hashes, checked against one another), the shards
// each agent announced it holds (Announce, with the shards of unreachable
// holders re-placed over the reachable ones: Replace), the agents refused
// for the run for serving bytes the catalog does not match (Refusals), and
// the placement of an epoch's positions over the agents that hold them
// (Place). It does no fetching: package engine runs the epochs over it.
package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// The catalog's errors.
var (
	// ErrFingerprint: a storage agent serves a different dataset than the
	// catalog's.
	ErrFingerprint = errors.New("catalog: dataset fingerprint mismatch")
	// ErrCatalog marks a malformed catalog stream.
	ErrCatalog = errors.New("catalog: bad catalog")
)

// Catalog is the dataset as a storage agent describes it. Sample ids are
// dense, 0 to Total-1.
//
// ReadCatalog checks it: the fingerprint must be the one its paths digest,
// sizes, labels and content hashes give (dataplanepb.Fingerprinter), so a
// storage agent cannot announce another's fingerprint with other content
// hashes; and every sample fetched raw is checked against its hash
// (engine's checkRaw), so it cannot serve other bytes under honest hashes either.
type Catalog struct {
	Fingerprint string
	Total       uint64
	Classes     []string
	Labels      []uint32
	RawSizes    []uint64
	// Hashes holds each sample's SHA-256, 32 bytes per sample in id order.
	Hashes []byte
	// PathsDigest is the storage agent's digest of the sample paths.
	PathsDigest []byte

	// paths are the sample paths as the digest hashes them (each path and
	// a NUL, in id order), pathEnds where each ends; both nil when the
	// storage agent sent none (see Path).
	paths    []byte
	pathEnds []uint32
	// headers are the samples' JPEG header summaries, jpeg.SummarySize
	// bytes each in id order, each checked by jpeg.ParseSummary; nil when
	// the storage agent sent none (see Header).
	headers []byte
}

// Header is sample i's JPEG header summary as the storage agent read it at
// indexing; ok is false when it is unknown (no header in the file's first
// bytes) or the catalog has none (a storage agent before
// CatalogPage.jpeg_headers). It is an estimate for planning: nothing
// checks it against the bytes fetched.
func (c *Catalog) Header(i uint64) (h jpeg.Summary, ok bool) {
	if c == nil || i >= uint64(len(c.headers)/jpeg.SummarySize) {
		return h, false
	}
	h, err := jpeg.ParseSummary(c.headers[jpeg.SummarySize*i:])
	return h, err == nil && h.Known()
}

// HasHeaders reports whether the catalog carries the samples' JPEG header
// summaries (each may still be unknown).
func (c *Catalog) HasHeaders() bool { return c != nil && len(c.headers) > 0 }

// addHeaders keeps a page's JPEG header summaries: every page must have
// one per sample or none, each valid; a page without them drops those
// kept so far for good.
func (c *Catalog) addHeaders(page *dataplanepb.CatalogPage, dropped *bool) error {
	hs := page.GetJpegHeaders()
	if len(hs) == 0 || *dropped {
		c.headers, *dropped = nil, true
		return nil
	}
	if len(hs) != jpeg.SummarySize*len(page.GetLabels()) {
		return fmt.Errorf("%w: page at %d has %d bytes of JPEG headers for %d samples", ErrCatalog, page.GetFirst(), len(hs), len(page.GetLabels()))
	}
	for j := 0; j < len(hs); j += jpeg.SummarySize {
		if _, err := jpeg.ParseSummary(hs[j:]); err != nil {
			return fmt.Errorf("%w: sample %d: %w", ErrCatalog, page.GetFirst()+uint64(j/jpeg.SummarySize), err)
		}
	}
	c.headers = append(c.headers, hs...)
	return nil
}

// Path is sample i's relative path in the dataset (quoted when it is not
// printable UTF-8), checked against
// PathsDigest, or "" when the catalog has none: the storage agent sent
// none (before CatalogPage.paths), or they passed maxCatalogPathBytes.
func (c *Catalog) Path(i uint64) string {
	if c == nil || i >= uint64(len(c.pathEnds)) {
		return ""
	}
	start := uint32(0)
	if i > 0 {
		start = c.pathEnds[i-1]
	}
	p := string(c.paths[start : c.pathEnds[i]-1])
	if utf8.ValidString(p) && !strings.ContainsFunc(p, unicode.IsControl) {
		return p
	}
	return strconv.Quote(p) // as the storage agent's dataset.DisplayName
}

// Bounds of the paths a catalog keeps.
const (
	// maxPathBytes bounds one path (Linux's PATH_MAX); a longer one makes
	// the catalog bad.
	maxPathBytes = 4096
	// maxCatalogPathBytes bounds the paths kept, all samples together:
	// past it they are dropped (reports then name samples by id only).
	maxCatalogPathBytes = 1 << 30
)

// addPaths keeps a page's paths: every page must have one per sample or
// none, and a page without them (or paths past maxCatalogPathBytes) drops
// those kept so far for good.
func (c *Catalog) addPaths(page *dataplanepb.CatalogPage, dropped *bool) error {
	ps := page.GetPaths()
	if len(ps) == 0 || *dropped {
		c.paths, c.pathEnds, *dropped = nil, nil, true
		return nil
	}
	if len(ps) != len(page.GetLabels()) {
		return fmt.Errorf("%w: page at %d has %d paths for %d samples", ErrCatalog, page.GetFirst(), len(ps), len(page.GetLabels()))
	}
	for _, p := range ps {
		if len(p) > maxPathBytes || bytes.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("%w: page at %d has a path of %d bytes or with a NUL", ErrCatalog, page.GetFirst(), len(p))
		}
		if len(c.paths)+len(p)+1 > maxCatalogPathBytes {
			c.paths, c.pathEnds, *dropped = nil, nil, true
			return nil
		}
		c.paths = append(append(c.paths, p...), 0)
		c.pathEnds = append(c.pathEnds, uint32(len(c.paths)))
	}
	return nil
}

// checkPaths checks the kept paths against PathsDigest.
func (c *Catalog) checkPaths() error {
	if c.pathEnds == nil {
		return nil
	}
	if d := sha256.Sum256(c.paths); !bytes.Equal(d[:], c.PathsDigest) {
		return fmt.Errorf("%w: the paths do not give the paths digest", ErrCatalog)
	}
	return nil
}

// Hash is sample i's content hash; ok is false when the catalog has none
// (built in tests without one).
func (c *Catalog) Hash(i uint64) (h [32]byte, ok bool) {
	if uint64(len(c.Hashes)) < 32*(i+1) {
		return h, false
	}
	copy(h[:], c.Hashes[32*i:])
	return h, true
}

// maxCatalog bounds the samples a catalog may declare (memory: 49 bytes
// per sample, paths aside).
const maxCatalog = 1 << 32

// ReadCatalog pages through a storage agent's catalog.
func ReadCatalog(ctx context.Context, c dataplanepb.StorageClient) (*Catalog, error) {
	stream, err := c.Catalog(ctx, &dataplanepb.CatalogRequest{})
	if err != nil {
		return nil, err
	}
	var cat *Catalog
	dropped, noHeaders := false, false
	for {
		page, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if cat == nil {
			if page.GetTotal() > maxCatalog {
				return nil, fmt.Errorf("%w: %d samples", ErrCatalog, page.GetTotal())
			}
			cat = &Catalog{
				Fingerprint: page.GetFingerprint(),
				Total:       page.GetTotal(),
				Classes:     page.GetClassNames(),
				Labels:      make([]uint32, 0, page.GetTotal()),
				RawSizes:    make([]uint64, 0, page.GetTotal()),
				Hashes:      make([]byte, 0, 32*page.GetTotal()),
				PathsDigest: page.GetPathsDigest(),
			}
		}
		if page.GetFirst() != uint64(len(cat.Labels)) {
			return nil, fmt.Errorf("%w: page starts at %d, want %d", ErrCatalog, page.GetFirst(), len(cat.Labels))
		}
		if len(page.GetLabels()) != len(page.GetRawSizes()) {
			return nil, fmt.Errorf("%w: page at %d has %d labels and %d sizes", ErrCatalog, page.GetFirst(), len(page.GetLabels()), len(page.GetRawSizes()))
		}
		if len(page.GetContentHashes()) != 32*len(page.GetLabels()) {
			return nil, fmt.Errorf("%w: page at %d has %d bytes of content hashes for %d samples", ErrCatalog, page.GetFirst(), len(page.GetContentHashes()), len(page.GetLabels()))
		}
		if uint64(len(cat.Labels)+len(page.GetLabels())) > cat.Total {
			return nil, fmt.Errorf("%w: more than the %d samples announced", ErrCatalog, cat.Total)
		}
		if err := cat.addPaths(page, &dropped); err != nil {
			return nil, err
		}
		if err := cat.addHeaders(page, &noHeaders); err != nil {
			return nil, err
		}
		cat.Labels = append(cat.Labels, page.GetLabels()...)
		cat.RawSizes = append(cat.RawSizes, page.GetRawSizes()...)
		cat.Hashes = append(cat.Hashes, page.GetContentHashes()...)
	}
	if cat == nil {
		return nil, fmt.Errorf("%w: no pages", ErrCatalog)
	}
	if uint64(len(cat.Labels)) != cat.Total {
		return nil, fmt.Errorf("%w: %d samples listed, %d announced", ErrCatalog, len(cat.Labels), cat.Total)
	}
	if len(cat.PathsDigest) != 32 {
		return nil, fmt.Errorf("%w: paths digest of %d bytes, want 32", ErrCatalog, len(cat.PathsDigest))
	}
	if err := cat.checkPaths(); err != nil {
		return nil, err
	}
	if fp := cat.fingerprint(); fp != cat.Fingerprint {
		return nil, fmt.Errorf("%w: %w: announced %q, its content hashes give %q", ErrCatalog, ErrFingerprint, cat.Fingerprint, fp)
	}
	return cat, nil
}

// fingerprint recomputes the fingerprint from the catalog's contents.
func (c *Catalog) fingerprint() string {
	fp := dataplanepb.NewFingerprinter(c.PathsDigest)
	for i := range c.Labels {
		h, _ := c.Hash(uint64(i))
		fp.Add(c.RawSizes[i], c.Labels[i], h)
	}
	return fp.Sum()
}

// CutAreas scales a profile's cuts to each epoch's crop boxes of run seed
// under p (profiler.CutAreas), from the dimensions in the catalog's
// headers; nil when the catalog has none.
func (c *Catalog) CutAreas(p *ops.Pipeline, seed uint64) *profiler.CutAreas {
	if !c.HasHeaders() || p == nil || !p.CanCut() {
		return nil
	}
	return &profiler.CutAreas{Pipe: p, Seed: seed, Image: func(id uint64) (profiler.CutImage, bool) {
		h, ok := c.Header(id)
		mw, mh := h.MCU()
		return profiler.CutImageOf(h.Width(), h.Height(), mw, mh, h.Components()), ok
	}}
}
