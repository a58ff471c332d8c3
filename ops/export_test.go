package ops

// Internals the external tests reach.
var (
	DCTScale         = dctScale
	DecodeBoxResized = decodeBoxResized
)

// TestEncodeOptions are EncodeOptions with the fields only tests set.
type TestEncodeOptions struct {
	EncodeOptions
	// YCCK, LumaSamp, RestartInterval, Arithmetic and NonInterleaved set
	// EncodeOptions' ycck, lumaSamp, restartInterval, arithmetic and
	// nonInterleaved.
	YCCK            bool
	LumaSamp        [2]int
	RestartInterval int
	Arithmetic      bool
	NonInterleaved  bool
}

// EncodeJPEGTest is EncodeJPEG with the test-only options.
func EncodeJPEGTest(img *Image, o TestEncodeOptions) ([]byte, error) {
	opt := o.EncodeOptions
	opt.YCCK, opt.LumaSampling, opt.RestartInterval, opt.Arithmetic = o.YCCK, o.LumaSamp, o.RestartInterval, o.Arithmetic
	opt.NonInterleaved = o.NonInterleaved
	return EncodeJPEG(img, opt)
}
