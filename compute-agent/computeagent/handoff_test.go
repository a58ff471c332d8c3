package computeagent

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sophon-dl/sophon/ops"
)

// socketPair is a connected pair of Unix stream sockets.
func socketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// TestHandoffNoAllocsPerBatch: in steady state a batch's whole cycle on
// the agent's side (rows placed into a leased slot, header, READY, the
// trainer's RELEASE read and applied) allocates nothing.
func TestHandoffNoAllocsPerBatch(t *testing.T) {
	const batch = 16
	l := newSlotLayout(batch, [3]int{8, 8, 3}, dtypeUint8, layoutNHWC)
	r, err := newRing("allocs", 2, l)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	agentSide, trainerSide := socketPair(t)
	tc := &trainerConn{c: agentSide, ring: r, hello: helloMsg{World: 1, LocalWorld: 1}}
	e := &epochRun{a: &Agent{m: newMetrics()}, cfg: &Config{Queue: 1}, bySplit: splitCounter{}}
	const batches = 1 << 20
	asm := newAssembler(e, []*trainerConn{tc}, false, batch, batch*batches, batches, []int{0}, 0)
	img := ops.NewImage(8, 8)
	fr := &frameReader{r: agentSide}
	var ready [5 + readyLen]byte
	var rel [5 + releaseLen]byte
	binary.LittleEndian.PutUint32(rel[:], 1+releaseLen)
	rel[4] = frameRelease
	wake := newWaiter()
	cycle := func() {
		for i := range batch {
			if err := asm.place(t.Context(), item{sample: uint64(i), image: img}, wake); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := io.ReadFull(trainerSide, ready[:]); err != nil || ready[4] != frameReady {
			t.Fatalf("READY: %v %x", err, ready[4])
		}
		copy(rel[5:9], ready[5:9])
		if _, err := trainerSide.Write(rel[:]); err != nil {
			t.Fatal(err)
		}
		typ, p, err := fr.next()
		if err != nil {
			t.Fatal(err)
		}
		m, err := decodeClientFrame(typ, p)
		if err != nil || !m.release.ok {
			t.Fatalf("RELEASE: %v", err)
		}
		if err := asm.release(tc, m.release.slot, m.release.waitNS); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 { // warm up the scratch slices and buffers
		cycle()
	}
	if got := testing.AllocsPerRun(50, cycle); got != 0 {
		t.Errorf("%.1f allocations per batch, want 0", got)
	}
}

func TestDecodeClientFrame(t *testing.T) {
	tests := []struct {
		name string
		typ  byte
		body string
		ok   bool
	}{
		{"hello", frameHello, `{"protocol":1,"rank":2,"world":4,"local_rank":0,"local_world":2}`, true},
		{"rank out of world", frameHello, `{"protocol":1,"rank":4,"world":4,"local_rank":0,"local_world":1}`, false},
		{"local ranks past world", frameHello, `{"protocol":1,"rank":3,"world":4,"local_rank":0,"local_world":2}`, false},
		{"unknown field", frameHello, `{"protocol":1,"world":1,"local_world":1,"bogus":1}`, false},
		{"bad dtype", frameHello, `{"protocol":1,"world":1,"local_world":1,"dtype":"int4"}`, false},
		{"epoch", frameEpoch, `{"epoch":3,"resume":{"batches":2,"consumed":"AAE="}}`, true},
		{"epoch missing", frameEpoch, `{"resume":null}`, false},
		{"negative resume", frameEpoch, `{"epoch":1,"resume":{"batches":-1}}`, false},
		{"trailing data", frameEpoch, `{"epoch":1} {}`, false},
		{"release", frameRelease, string(make([]byte, releaseLen)), true},
		{"short release", frameRelease, "abc", false},
		{"agent frame", frameReady, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeClientFrame(tt.typ, []byte(tt.body))
			if (err == nil) != tt.ok {
				t.Errorf("got %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestFrameTooLong(t *testing.T) {
	a, b := socketPair(t)
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], maxFrame+1)
	go b.Write(hdr[:])
	fr := &frameReader{r: a}
	if _, _, err := fr.next(); err == nil || cap(fr.buf) != 0 {
		t.Errorf("got %v with a %d-byte buffer, want a refusal before allocating", err, cap(fr.buf))
	}
}

// FuzzDecodeHandoff feeds arbitrary frames from a trainer to the decoder.
func FuzzDecodeHandoff(f *testing.F) {
	f.Add(byte(frameHello), []byte(`{"protocol":1,"rank":0,"world":1,"local_rank":0,"local_world":1}`))
	f.Add(byte(frameEpoch), []byte(`{"epoch":3,"resume":{"batches":2,"consumed":"AAE="}}`))
	f.Add(byte(frameRelease), make([]byte, releaseLen))
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		m, err := decodeClientFrame(typ, body)
		if err != nil {
			return
		}
		if h := m.hello; h != nil && h.validate() != nil {
			t.Errorf("accepted an invalid HELLO: %+v", h)
		}
		if e := m.epoch; e != nil && (e.Epoch == nil || (e.Resume != nil && e.Resume.Batches < 0)) {
			t.Errorf("accepted an invalid EPOCH: %+v", e)
		}
	})
}
