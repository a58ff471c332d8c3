package cache

import (
	"crypto/sha256"
	"fmt"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// An entry's payload is the sample's value at the view's split: at split
// 0 the raw file itself, at a finished split the wire form of the
// pipeline's output (uncompressed).

// GetValue is sample's entry (Get) as the value at the view's split: the
// raw file, checked against the catalog's content hash (hash; a sample it
// has none for is not checked), or the finished output's wire form,
// decoded under lim; n is the entry's bytes read. An entry that does not
// hold such a value is dropped (Drop) and its error wraps ErrEntry: a
// raw file that does not match is the entry's fault, not the storage
// agent's.
func (v *View) GetValue(sample uint64, lim wireform.Limits, hash func(sample uint64) ([32]byte, bool)) (_ ops.Value, n int64, _ error) {
	payload, n, err := v.Get(sample)
	if err != nil {
		return nil, n, err
	}
	var val ops.Value
	if v.split != 0 {
		if val, err = wireform.Decode(payload, lim); err != nil {
			err = fmt.Errorf("%w: sample %d: %w", ErrEntry, sample, err)
		}
	} else if want, ok := hash(sample); ok && sha256.Sum256(payload) != want {
		err = fmt.Errorf("%w: sample %d: raw bytes do not match the catalog's content hash", ErrEntry, sample)
	} else {
		val = ops.Encoded(payload)
	}
	if err != nil {
		v.Drop(sample, err)
		return nil, n, err
	}
	return val, n, nil
}

// PutValue puts sample, finished from its raw file in (checked against
// the catalog) with output out: in itself at split 0, out's wire form at
// a finished split (Put). It reports whether the entry was queued; not
// when in is not a raw file or out does not encode.
func (v *View) PutValue(sample uint64, in, out ops.Value) bool {
	var payload []byte
	if v.split == 0 {
		raw, ok := in.(ops.Encoded)
		if !ok {
			return false
		}
		payload = raw
	} else {
		b, err := wireform.Encode(out, wireform.CodecNone)
		if err != nil {
			return false
		}
		payload = b
	}
	return v.Put(sample, payload)
}
