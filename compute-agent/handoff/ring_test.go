package handoff

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestRingNothingInDevShmAndResident(t *testing.T) {
	before, _ := os.ReadDir("/dev/shm")
	l := NewSlotLayout(256, [3]int{224, 224, 3}, DTypeUint8, LayoutNHWC)
	slots := (1 << 30) / l.SlotBytes // a 1 GiB budget
	r, err := NewRing("sophon-test", slots, l)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rss0 := shmemKB(t)
	for i := range slots {
		for j := range l.Batch {
			row := r.Row(i, j)
			for k := 0; k < len(row); k += 4096 {
				row[k] = byte(j)
			}
			r.SetMeta(i, j, int64(j), uint64(j), uint64(j))
		}
		r.WriteHeader(i, l.Batch, 0, uint64(i))
	}
	after, _ := os.ReadDir("/dev/shm")
	if len(after) != len(before) {
		t.Errorf("/dev/shm had %d entries, now %d", len(before), len(after))
	}
	grew := float64(shmemKB(t)-rss0) * 1024
	size := float64(r.Size())
	t.Logf("ring %d slots x %d bytes = %.0f MiB; resident shared memory grew %.0f MiB", slots, l.SlotBytes, size/(1<<20), grew/(1<<20))
	if grew > 1.05*size || grew < 0.95*size {
		t.Errorf("resident shared memory grew %.0f bytes for a ring of %.0f", grew, size)
	}
}

// shmemKB is the process's resident shared memory (RssShmem).
func shmemKB(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	var kb int64
	for line := range strings.Lines(string(b)) {
		if _, err := fmt.Sscanf(line, "RssShmem: %d kB", &kb); err == nil {
			return kb
		}
	}
	t.Skip("no RssShmem in /proc/self/status")
	return 0
}

// TestRingWithClose: Close waits for the writes running under With (a
// rank that disconnects while a worker fills its row) and later With calls
// run nothing: no write ever lands in unmapped memory (under -race, no
// race either).
func TestRingWithClose(t *testing.T) {
	l := NewSlotLayout(4, [3]int{32, 32, 3}, DTypeUint8, LayoutNHWC)
	r, err := NewRing("sophon-test", 2, l)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, l.RowBytes)
	var wg sync.WaitGroup
	var ran, refused atomic.Int64
	start := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			<-start
			for k := range 2000 {
				if r.With(func() {
					copy(r.Row(k%2, w), src)
					r.SetMeta(k%2, w, 1, 2, 3)
				}) {
					ran.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	close(start)
	for ran.Load() < 100 {
		runtime.Gosched()
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if r.With(func() { t.Error("With ran on a closed ring") }) {
		t.Error("With reported running on a closed ring")
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	t.Logf("%d writes before Close, %d refused after", ran.Load(), refused.Load())
	if ran.Load() < 100 || ran.Load()+refused.Load() != 8000 {
		t.Errorf("%d writes and %d refusals, want 8000 in all", ran.Load(), refused.Load())
	}
}
