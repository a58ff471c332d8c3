//go:build !linux

package tcpinfo

import (
	"fmt"
	"net"
)

// Read is not available here.
func Read(net.Conn) (Info, error) { return Info{}, ErrUnavailable }

// SetCongestion is not available here; an empty name changes nothing.
func SetCongestion(_ net.Conn, name string) error {
	if name == "" {
		return nil
	}
	return fmt.Errorf("%w: %q: TCP_CONGESTION is Linux's", ErrCongestion, name)
}

// Congestion is not available here.
func Congestion(net.Conn) (string, error) { return "", ErrUnavailable }

// Available is not available here.
func Available() ([]string, error) { return nil, ErrUnavailable }

// Check passes the empty name only: TCP_CONGESTION is Linux's.
func Check(name string) error { return SetCongestion(nil, name) }
