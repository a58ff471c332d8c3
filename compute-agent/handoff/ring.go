package handoff

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Slot header constants (docs/handoff.md, "Slot layout").
const (
	SlotMagic      = 0x42485053 // "SPHB" little-endian
	SlotVersion    = 1
	SlotHeaderSize = 128

	DTypeUint8   = 1
	DTypeFloat32 = 2
	LayoutNHWC   = 1
	LayoutNCHW   = 2
)

// SlotLayout is the geometry of every slot of a ring.
type SlotLayout struct {
	Batch    int    // rows per slot (capacity)
	RowBytes int    // bytes of one image row
	DType    uint8  // dtypeUint8 or dtypeFloat32
	Layout   uint8  // layoutNHWC or layoutNCHW
	Shape    [3]int // one row's shape: [H, W, C] (NHWC) or [C, H, W] (NCHW)

	LabelsOff, IDsOff, PosOff int // from the slot's start
	SlotBytes                 int // whole slot, page-aligned
}

// NewSlotLayout lays out batch rows of rowShape (elements of elemBytes):
// header, images, labels (int64), sample ids (uint64), positions (uint64).
func NewSlotLayout(batch int, rowShape [3]int, dtype, layout uint8) SlotLayout {
	elem := 1
	if dtype == DTypeFloat32 {
		elem = 4
	}
	l := SlotLayout{Batch: batch, DType: dtype, Layout: layout, Shape: rowShape,
		RowBytes: rowShape[0] * rowShape[1] * rowShape[2] * elem}
	align := func(n, a int) int { return (n + a - 1) / a * a }
	l.LabelsOff = align(SlotHeaderSize+batch*l.RowBytes, 64)
	l.IDsOff = l.LabelsOff + 8*batch
	l.PosOff = l.IDsOff + 8*batch
	l.SlotBytes = align(l.PosOff+8*batch, os.Getpagesize())
	return l
}

// Ring is one trainer rank's slots in an anonymous shared-memory file
// (memfd_create): nothing appears under /dev/shm, its size is not bound by
// a container's /dev/shm, and the memory is freed once the agent and the
// trainer have both closed it, crash or not. The file descriptor goes to
// the trainer once, with SCM_RIGHTS.
type Ring struct {
	// mu keeps the memory mapped while With runs; Close waits for it.
	mu       sync.RWMutex
	FD       int
	mem      []byte
	Slots    int
	Geometry SlotLayout
}

func NewRing(name string, slots int, l SlotLayout) (*Ring, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("handoff: memfd_create: %w", err)
	}
	size := slots * l.SlotBytes
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("handoff: ring of %d bytes: %w", size, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("handoff: mmap ring of %d bytes: %w", size, err)
	}
	return &Ring{FD: fd, mem: mem, Slots: slots, Geometry: l}, nil
}

// Size is the ring's length in bytes.
func (r *Ring) Size() int { return len(r.mem) }

// Slot is slot i's memory.
func (r *Ring) Slot(i int) []byte {
	return r.mem[i*r.Geometry.SlotBytes : (i+1)*r.Geometry.SlotBytes]
}

// Row is the image memory of row j of slot i.
func (r *Ring) Row(i, j int) []byte {
	off := i*r.Geometry.SlotBytes + SlotHeaderSize + j*r.Geometry.RowBytes
	return r.mem[off : off+r.Geometry.RowBytes]
}

// SetMeta writes row j's label, sample id and global position.
func (r *Ring) SetMeta(i, j int, label int64, sample, pos uint64) {
	s := r.Slot(i)
	binary.LittleEndian.PutUint64(s[r.Geometry.LabelsOff+8*j:], uint64(label))
	binary.LittleEndian.PutUint64(s[r.Geometry.IDsOff+8*j:], sample)
	binary.LittleEndian.PutUint64(s[r.Geometry.PosOff+8*j:], pos)
}

// Compact moves the rows of slot i not marked in holes (the first n of
// holes) to the front, keeping their order, and returns how many there
// are.
func (r *Ring) Compact(i int, holes []bool) int {
	s := r.Slot(i)
	w := 0
	for j, h := range holes {
		if h {
			continue
		}
		if w != j {
			copy(r.Row(i, w), r.Row(i, j))
			for _, off := range [3]int{r.Geometry.LabelsOff, r.Geometry.IDsOff, r.Geometry.PosOff} {
				copy(s[off+8*w:off+8*w+8], s[off+8*j:off+8*j+8])
			}
		}
		w++
	}
	return w
}

// WriteHeader fills slot i's header for rows valid rows.
func (r *Ring) WriteHeader(i, rows int, epoch, index uint64) {
	s := r.Slot(i)
	le := binary.LittleEndian
	le.PutUint32(s[0:], SlotMagic)
	le.PutUint16(s[4:], SlotVersion)
	s[6], s[7] = r.Geometry.DType, r.Geometry.Layout
	le.PutUint32(s[8:], uint32(rows))
	le.PutUint32(s[12:], uint32(r.Geometry.Batch))
	le.PutUint32(s[16:], uint32(rows))
	for k, d := range r.Geometry.Shape {
		le.PutUint32(s[20+4*k:], uint32(d))
	}
	le.PutUint64(s[32:], epoch)
	le.PutUint64(s[40:], index)
	le.PutUint64(s[48:], SlotHeaderSize)
	le.PutUint64(s[56:], uint64(r.Geometry.LabelsOff))
	le.PutUint64(s[64:], uint64(r.Geometry.IDsOff))
	le.PutUint64(s[72:], uint64(r.Geometry.PosOff))
}

// With runs f, which may use the ring's memory, unless the ring is closed,
// and reports whether it ran. Close waits for the f running: a rank that
// disconnects while a worker writes its row unmaps the ring after the
// write, never under it.
func (r *Ring) With(f func()) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.mem == nil {
		return false
	}
	f()
	return true
}

// Close unmaps the ring and closes its file, once no With runs. Safe
// twice.
func (r *Ring) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	if cerr := unix.Close(r.FD); err == nil {
		err = cerr
	}
	r.mem = nil
	return err
}
