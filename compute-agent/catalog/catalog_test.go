package catalog

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"

	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// pagesClient is a StorageClient whose Catalog streams fixed pages.
type pagesClient struct {
	dataplanepb.StorageClient
	pages []*dataplanepb.CatalogPage
}

func (c *pagesClient) Catalog(context.Context, *dataplanepb.CatalogRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[dataplanepb.CatalogPage], error) {
	return &pagesStream{pages: c.pages}, nil
}

type pagesStream struct {
	grpc.ClientStream
	pages []*dataplanepb.CatalogPage
}

func (s *pagesStream) Recv() (*dataplanepb.CatalogPage, error) {
	if len(s.pages) == 0 {
		return nil, io.EOF
	}
	p := s.pages[0]
	s.pages = s.pages[1:]
	return p, nil
}

// catalogPages is a valid 4-sample catalog in two pages, each page's
// header bytes from hdrs (nil for none).
func catalogPages(hdrs ...[]byte) []*dataplanepb.CatalogPage {
	pd := sha256.Sum256(nil)
	fp := dataplanepb.NewFingerprinter(pd[:])
	var hashes []byte
	for i := range 4 {
		h := sha256.Sum256([]byte{byte(i)})
		fp.Add(uint64(10+i), 0, h)
		hashes = append(hashes, h[:]...)
	}
	return []*dataplanepb.CatalogPage{
		{Fingerprint: fp.Sum(), Total: 4, ClassNames: []string{"c"}, PathsDigest: pd[:], First: 0,
			Labels: []uint32{0, 0}, RawSizes: []uint64{10, 11}, ContentHashes: hashes[:64], JpegHeaders: hdrs[0]},
		{First: 2, Labels: []uint32{0, 0}, RawSizes: []uint64{12, 13}, ContentHashes: hashes[64:], JpegHeaders: hdrs[1]},
	}
}

// Header summaries in their binary form: 500x375 4:2:0 baseline, 64x48
// grey progressive, unknown.
var (
	hdr420  = []byte{0x01, 0xF4, 0x01, 0x77, 0x80 | 0x10 | 0x05}
	hdrGrey = []byte{0, 64, 0, 48, 0x80 | 0x40}
	hdrNone = make([]byte, jpeg.SummarySize)
)

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// TestCatalogHeaders: ReadCatalog keeps the pages' JPEG header summaries,
// Header says unknown for an unknown one and for a catalog without them
// (an older storage agent, or a page without them), and a page whose
// headers are not one valid summary per sample is refused.
func TestCatalogHeaders(t *testing.T) {
	read := func(hdrs ...[]byte) (*Catalog, error) {
		return ReadCatalog(context.Background(), &pagesClient{pages: catalogPages(hdrs...)})
	}
	c, err := read(cat(hdr420, hdrNone), cat(hdrGrey, hdr420))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"500x375 3c mcu 16x16", "unknown", "64x48 1c mcu 8x8 progressive", "500x375 3c mcu 16x16"} {
		h, ok := c.Header(uint64(i))
		if h.String() != want || ok != (want != "unknown") {
			t.Errorf("sample %d: Header = %v, %v; want %s", i, h, ok, want)
		}
	}
	if _, ok := c.Header(4); ok {
		t.Error("Header(4) of 4 samples is ok")
	}
	for name, hdrs := range map[string][2][]byte{
		"none":               {nil, nil},
		"first page without": {nil, cat(hdrGrey, hdr420)},
		"last page without":  {cat(hdr420, hdr420), nil},
	} {
		c, err := read(hdrs[0], hdrs[1])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range uint64(4) {
			if h, ok := c.Header(i); ok {
				t.Errorf("%s: sample %d: Header = %v, want none", name, i, h)
			}
		}
	}
	for name, hdrs := range map[string][2][]byte{
		"one short":      {cat(hdr420, hdr420[:4]), cat(hdr420, hdr420)},
		"one too many":   {cat(hdr420, hdr420, hdr420), cat(hdr420, hdr420)},
		"zero width":     {cat(hdr420, hdr420), cat(hdr420, []byte{0, 0, 0, 9, 0x80})},
		"component code": {cat(hdr420, []byte{0, 9, 0, 9, 0xB0}), cat(hdr420, hdr420)},
		"unknown, dirty": {cat(hdr420, hdr420), cat([]byte{0, 9, 0, 9, 0}, hdr420)},
	} {
		if _, err := read(hdrs[0], hdrs[1]); !errors.Is(err, ErrCatalog) {
			t.Errorf("%s: %v, want ErrCatalog", name, err)
		}
	}
	var nilCat *Catalog
	if _, ok := nilCat.Header(0); ok {
		t.Error("a nil catalog's Header is ok")
	}
}
