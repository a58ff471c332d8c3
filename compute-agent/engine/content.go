package engine

import (
	"crypto/sha256"
	"fmt"
)

// checkRaw compares a sample fetched raw (split 0) with the catalog's
// content hash. On a mismatch it refuses f's storage agent for the rest of
// the run: its open stream fails at the next response (its outstanding
// requests go to other replicas) and it is never used again. Intermediates
// (split > 0) cannot be checked: an offloading plan trusts the storage
// agent for the samples it offloads.
func (f *Fetcher) checkRaw(sample uint64, raw []byte) error {
	cat := f.e.cat
	want, ok := cat.Hash(sample)
	if !ok {
		return nil // a catalog without hashes is refused when read
	}
	got := sha256.Sum256(raw)
	if got == want {
		return nil
	}
	err := fmt.Errorf("sample %d from storage agent %s: %w: sha256 %x, catalog %x", sample, f.name, ErrContentMismatch, got[:8], want[:8])
	f.e.cfg.Refusals.Refuse(f.name, err)
	return err
}
