package membership

import "errors"

var (
	// ErrMetaTooLarge means the JSON form of a [Meta] does not fit in
	// memberlist's node meta ([memberlist.MetaMaxSize] bytes).
	ErrMetaTooLarge = errors.New("membership: meta too large")
	// ErrBadMeta means a [Meta] is invalid (unknown role, negative cores,
	// malformed gRPC address) or a peer's meta does not decode.
	ErrBadMeta = errors.New("membership: bad meta")
	// ErrBadConfig means a [Config] field is invalid.
	ErrBadConfig = errors.New("membership: bad config")
	// ErrBadSecretKey means a gossip key is not 16, 24 or 32 bytes, or its
	// text form is neither hex nor base64.
	ErrBadSecretKey = errors.New("membership: bad secret key")
	// ErrInsecure means a [Config] has no secret key or no label and does
	// not say Insecure.
	ErrInsecure = errors.New("membership: insecure gossip")
	// ErrNoPeerJoined means none of [Config.Join] could be joined.
	ErrNoPeerJoined = errors.New("membership: no peer joined")
	// ErrClosed means the [Node] has been closed.
	ErrClosed = errors.New("membership: node closed")
)
