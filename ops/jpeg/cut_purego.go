//go:build !cgo

package jpeg

// Cut needs libturbojpeg's lossless transform, which this build lacks: it
// declines every cut.
func Cut(_ []byte, _ Header, _ Rect, _ DecodeLimits) ([]byte, Rect, error) {
	return nil, Rect{}, wrapf(ErrCannotCut, "this build has no lossless jpeg transform (built without cgo)")
}
