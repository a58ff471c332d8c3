package ops

// Internals the external tests reach.
var (
	DCTScale         = dctScale
	DecodeBoxResized = decodeBoxResized
)
