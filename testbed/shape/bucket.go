// Package shape throttles TCP traffic inside the process, for machines
// where the testbed cannot use tc in network namespaces (not root): a token
// [Bucket], a [net.Conn] wrapper that spends it ([Conn]), and a shaping TCP
// [Proxy] that plays the link between a compute agent and a storage agent
// on loopback. It also parses tc-style rates ([ParseRate]).
package shape

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrRate: a rate that is not a positive tc-style rate.
var ErrRate = errors.New("shape: bad rate")

// rateUnits are tc's rate units, in bits per second. A bare number is bits
// per second, as in tc.
var rateUnits = []struct {
	suffix string
	bits   float64
}{
	// Longest suffixes first, so "kbps" is not read as "bps".
	{"kibit", 1024}, {"mibit", 1 << 20}, {"gibit", 1 << 30}, {"tibit", 1 << 40},
	{"kibps", 8 * 1024}, {"mibps", 8 << 20}, {"gibps", 8 << 30}, {"tibps", 8 << 40},
	{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12},
	{"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}, {"tbps", 8e12},
	{"bit", 1}, {"bps", 8},
}

// ParseRate reads a tc rate ("500mbit", "1gbit", "12.5mbps", "64kibit")
// and returns it in bits per second. As in tc(8), *bit units are bits and
// *bps units bytes per second, k/m/g/t are powers of 1000 and ki/mi/gi/ti
// powers of 1024, and a bare number is bits per second.
func ParseRate(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range rateUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.bits
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%w: %q", ErrRate, s)
	}
	return v * mult, nil
}

// Bucket is a token bucket: tokens (bytes) accrue at a fixed rate up to the
// burst size, and Wait spends them, blocking while the bucket is in debt.
// A caller may take more than is there: the bucket goes into debt and the
// next callers wait it off, so the long-run rate is exact whatever the
// sleep granularity. It is safe for concurrent use; waiters are served in
// the order they call.
type Bucket struct {
	rate  float64 // bytes per second
	burst float64

	mu     sync.Mutex
	tokens float64 // may be negative: debt
	last   time.Time
	now    func() time.Time
}

// NewBucket returns a bucket of bytesPerSec that holds at most burst bytes
// and starts full. bytesPerSec must be positive; burst below 1 means 1.
func NewBucket(bytesPerSec float64, burst int) *Bucket {
	if !(bytesPerSec > 0) {
		panic(fmt.Sprintf("shape: bucket rate %v is not positive", bytesPerSec))
	}
	b := float64(max(burst, 1))
	return &Bucket{rate: bytesPerSec, burst: b, tokens: b, now: time.Now, last: time.Now()}
}

// Rate is the bucket's rate in bytes per second.
func (b *Bucket) Rate() float64 { return b.rate }

// Burst is the bucket's size in bytes.
func (b *Bucket) Burst() int { return int(b.burst) }

// reserve takes n tokens and returns how long the caller must wait before
// using them.
func (b *Bucket) reserve(n int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// Wait takes n bytes' worth of tokens, blocking until the bucket has paid
// off the debt they make, or ctx ends. The tokens stay spent when ctx ends.
func (b *Bucket) Wait(ctx context.Context, n int) error {
	if n <= 0 {
		return ctx.Err()
	}
	d := b.reserve(n)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
