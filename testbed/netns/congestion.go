package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
)

// ErrCongestion is a congestion control the kernel does not offer.
var ErrCongestion = errors.New("netns: congestion control")

// ccFile is the network namespace's default TCP congestion control: a
// per-namespace sysctl (Linux 4.15 on), which a new namespace takes from
// the host's.
const ccFile = "/proc/sys/net/ipv4/tcp_congestion_control"

// ccName is what a congestion control's name may hold.
var ccName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,15}$`)

// CheckCongestion checks that name can be a congestion control's name
// (cubic, bbr, reno...); whether the kernel offers it, only setting it
// says.
func CheckCongestion(name string) error {
	if !ccName.MatchString(name) {
		return fmt.Errorf("%w %q: want a name such as cubic, bbr or reno", ErrCongestion, name)
	}
	return nil
}

// SetCongestion makes name the default TCP congestion control of the
// node's namespace, for the connections opened in it afterwards. A name
// the kernel does not offer (not built, its module not loadable) fails
// with ErrCongestion, naming the ones it offers.
func (n *Node) SetCongestion(name string) error {
	if err := CheckCongestion(name); err != nil {
		return err
	}
	return n.inNamespace(func() error {
		err := os.WriteFile(ccFile, []byte(name), 0)
		if errors.Is(err, fs.ErrNotExist) { // ENOENT: no such algorithm
			avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
			return fmt.Errorf("%w %q: not offered by this kernel (available: %s)", ErrCongestion, name, strings.TrimSpace(string(avail)))
		}
		if err != nil {
			return fmt.Errorf("netns: %s in %s: %w", ccFile, n.NS, err)
		}
		return nil
	})
}

// Congestion is the default TCP congestion control of the node's
// namespace.
func (n *Node) Congestion() (string, error) {
	var name string
	err := n.inNamespace(func() error {
		b, err := os.ReadFile(ccFile)
		name = strings.TrimSpace(string(b))
		return err
	})
	return name, err
}
