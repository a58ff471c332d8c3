package ops

import "fmt"

// wrapf returns an error that wraps sentinel and adds a formatted detail.
func wrapf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
