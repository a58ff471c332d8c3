package computeagent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Catalog is the dataset as a storage agent describes it. Sample ids are
// dense, 0 to Total-1.
type Catalog struct {
	Fingerprint string
	Total       uint64
	Classes     []string
	Labels      []uint32
	RawSizes    []uint64
}

// ErrCatalog marks a malformed catalog stream.
var ErrCatalog = errors.New("computeagent: bad catalog")

// maxCatalog bounds the samples a catalog may declare (memory: 12 bytes
// per sample).
const maxCatalog = 1 << 32

// readCatalog pages through a storage agent's catalog.
func readCatalog(ctx context.Context, c dataplanepb.StorageClient) (*Catalog, error) {
	stream, err := c.Catalog(ctx, &dataplanepb.CatalogRequest{})
	if err != nil {
		return nil, err
	}
	var cat *Catalog
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
			}
		}
		if page.GetFirst() != uint64(len(cat.Labels)) {
			return nil, fmt.Errorf("%w: page starts at %d, want %d", ErrCatalog, page.GetFirst(), len(cat.Labels))
		}
		if len(page.GetLabels()) != len(page.GetRawSizes()) {
			return nil, fmt.Errorf("%w: page at %d has %d labels and %d sizes", ErrCatalog, page.GetFirst(), len(page.GetLabels()), len(page.GetRawSizes()))
		}
		if uint64(len(cat.Labels)+len(page.GetLabels())) > cat.Total {
			return nil, fmt.Errorf("%w: more than the %d samples announced", ErrCatalog, cat.Total)
		}
		cat.Labels = append(cat.Labels, page.GetLabels()...)
		cat.RawSizes = append(cat.RawSizes, page.GetRawSizes()...)
	}
	if cat == nil {
		return nil, fmt.Errorf("%w: no pages", ErrCatalog)
	}
	if uint64(len(cat.Labels)) != cat.Total {
		return nil, fmt.Errorf("%w: %d samples listed, %d announced", ErrCatalog, len(cat.Labels), cat.Total)
	}
	return cat, nil
}
