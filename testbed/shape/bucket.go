// Package shape throttles TCP traffic inside the process, for machines
// where the testbed cannot use tc in network namespaces (not root): a token
// [Bucket], a [net.Conn] wrapper that spends it ([Conn]), and a shaping TCP
// [Proxy] that plays the link between a compute agent and a storage agent
// on loopback. It also parses tc-style rates once, into the [Rate] every
// shaper of the testbed takes ([ParseRate]), and rates that change over
// time ([Schedule]).
package shape

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

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
