package membership

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// ParseSecretKey reads a gossip encryption key from its text form: hex (32,
// 48 or 64 digits) or base64 (standard or URL alphabet, padded or not) of 16,
// 24 or 32 bytes, selecting AES-128, AES-192 or AES-256. Surrounding white
// space is ignored, so the contents of a key file can be passed as they are.
// An empty string means no key and returns nil, nil.
//
// A string that is valid hex of a valid length is read as hex, even though it
// may also be valid base64.
func ParseSecretKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if k, err := hex.DecodeString(s); err == nil {
		if checkKeyLen(len(k)) == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding,
	} {
		k, err := enc.DecodeString(s)
		if err != nil {
			continue
		}
		if err := checkKeyLen(len(k)); err != nil {
			return nil, err
		}
		return k, nil
	}
	return nil, fmt.Errorf("%w: neither hex nor base64 of 16, 24 or 32 bytes (%d characters)", ErrBadSecretKey, len(s))
}

// checkKeyLen accepts the AES key sizes memberlist's keyring supports.
func checkKeyLen(n int) error {
	switch n {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%w: %d bytes, want 16, 24 or 32", ErrBadSecretKey, n)
}
