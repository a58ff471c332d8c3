// Package ops is the preprocessing op library shared by the storage agent and
// the compute agent.
//
// A sample moves through a [Pipeline] as a [Value]: encoded JPEG bytes
// ([Encoded]), a decoded image ([Image], uint8 HWC RGB) or a tensor ([Tensor],
// float32 CHW). Every op is a pure function of its input and of a random
// generator seeded by hash(run seed, epoch, sample, op index) (see [SeedFor]),
// so running ops[0:k] on one node, shipping the intermediate in its wire form
// (package [github.com/sophon-dl/sophon/ops/wireform], which imports ops and
// which ops does not use) and running ops[k:n] on another gives output
// byte-identical to running all n ops in one place.
//
// The JPEG codec (libjpeg-turbo under cgo, image/jpeg otherwise) and the
// lossless JPEG-domain crop are package [github.com/sophon-dl/sophon/ops/jpeg],
// which works on plain pixel buffers; ops keeps their API under its own names
// (DecodeJPEG, EncodeJPEG, ReadJPEGHeader, DecodeLimits, the JPEG errors) and
// adapts them to its values.
package ops
