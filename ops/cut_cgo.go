//go:build cgo

package ops

// cutJPEG cuts data (whose header is h) losslessly to the whole iMCUs that
// cover want, returning the cut file and the rectangle of the original it
// holds. TODO(h-cut): libturbojpeg's tjTransform with TJXOPT_CROP.
func cutJPEG(data []byte, h JPEGHeader, want Rect, lim DecodeLimits) ([]byte, Rect, error) {
	return nil, Rect{}, wrapf(ErrCannotCut, "not implemented yet")
}
