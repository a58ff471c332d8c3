// Package synth generates deterministic photo-like test images and datasets:
// the JPEGs that the op library's tests and benchmarks, and later the
// testbed, share.
//
// [Photo] renders a w x h image from a seed: a sky and ground gradient,
// soft-edged shapes with gradients, and fractal texture and grain, tuned so
// that at quality 90 the encoded sizes resemble real photos' (about 110 KB
// at 500x375, 300 KB at 1024x768). [JPEG] renders and encodes one;
// [Varied] is the fixed set of sizes, colour spaces and encodings the tests
// use; a [Spec] ([ImageNetLike], [OpenImagesLike]) draws per-sample
// dimensions, detail and quality so that a generated dataset's file sizes
// follow a real dataset's, and [WriteImageFolder] writes one to disk.
//
// Everything is a pure function of its seed: pixel maths is integer-only so
// the same seed gives the same pixels on every platform, and dataset files
// do not depend on how many workers wrote them. Encoded bytes are the JPEG
// backend's ([ops.EncodeJPEG]) and so are only identical across machines
// that use the same backend and library version.
package synth
