package computeagent

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Slot header constants (docs/handoff.md, "Slot layout").
const (
	slotMagic      = 0x42485053 // "SPHB" little-endian
	slotVersion    = 1
	slotHeaderSize = 128

	dtypeUint8   = 1
	dtypeFloat32 = 2
	layoutNHWC   = 1
	layoutNCHW   = 2
)

// slotLayout is the geometry of every slot of a ring.
type slotLayout struct {
	batch    int    // rows per slot (capacity)
	rowBytes int    // bytes of one image row
	dtype    uint8  // dtypeUint8 or dtypeFloat32
	layout   uint8  // layoutNHWC or layoutNCHW
	shape    [3]int // one row's shape: [H, W, C] (NHWC) or [C, H, W] (NCHW)

	labelsOff, idsOff, posOff int // from the slot's start
	slotBytes                 int // whole slot, page-aligned
}

// newSlotLayout lays out batch rows of rowShape (elements of elemBytes):
// header, images, labels (int64), sample ids (uint64), positions (uint64).
func newSlotLayout(batch int, rowShape [3]int, dtype, layout uint8) slotLayout {
	elem := 1
	if dtype == dtypeFloat32 {
		elem = 4
	}
	l := slotLayout{batch: batch, dtype: dtype, layout: layout, shape: rowShape,
		rowBytes: rowShape[0] * rowShape[1] * rowShape[2] * elem}
	align := func(n, a int) int { return (n + a - 1) / a * a }
	l.labelsOff = align(slotHeaderSize+batch*l.rowBytes, 64)
	l.idsOff = l.labelsOff + 8*batch
	l.posOff = l.idsOff + 8*batch
	l.slotBytes = align(l.posOff+8*batch, os.Getpagesize())
	return l
}

// ring is one trainer rank's slots in an anonymous shared-memory file
// (memfd_create): nothing appears under /dev/shm, its size is not bound by
// a container's /dev/shm, and the memory is freed once the agent and the
// trainer have both closed it, crash or not. The file descriptor goes to
// the trainer once, with SCM_RIGHTS.
type ring struct {
	fd    int
	mem   []byte
	slots int
	l     slotLayout
}

func newRing(name string, slots int, l slotLayout) (*ring, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("computeagent: memfd_create: %w", err)
	}
	size := slots * l.slotBytes
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("computeagent: ring of %d bytes: %w", size, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("computeagent: mmap ring of %d bytes: %w", size, err)
	}
	return &ring{fd: fd, mem: mem, slots: slots, l: l}, nil
}

// size is the ring's length in bytes.
func (r *ring) size() int { return len(r.mem) }

// slot is slot i's memory.
func (r *ring) slot(i int) []byte {
	return r.mem[i*r.l.slotBytes : (i+1)*r.l.slotBytes]
}

// row is the image memory of row j of slot i.
func (r *ring) row(i, j int) []byte {
	off := i*r.l.slotBytes + slotHeaderSize + j*r.l.rowBytes
	return r.mem[off : off+r.l.rowBytes]
}

// setMeta writes row j's label, sample id and global position.
func (r *ring) setMeta(i, j int, label int64, sample, pos uint64) {
	s := r.slot(i)
	binary.LittleEndian.PutUint64(s[r.l.labelsOff+8*j:], uint64(label))
	binary.LittleEndian.PutUint64(s[r.l.idsOff+8*j:], sample)
	binary.LittleEndian.PutUint64(s[r.l.posOff+8*j:], pos)
}

// compact moves the rows of slot i not marked in holes (the first n of
// holes) to the front, keeping their order, and returns how many there
// are.
func (r *ring) compact(i int, holes []bool) int {
	s := r.slot(i)
	w := 0
	for j, h := range holes {
		if h {
			continue
		}
		if w != j {
			copy(r.row(i, w), r.row(i, j))
			for _, off := range [3]int{r.l.labelsOff, r.l.idsOff, r.l.posOff} {
				copy(s[off+8*w:off+8*w+8], s[off+8*j:off+8*j+8])
			}
		}
		w++
	}
	return w
}

// writeHeader fills slot i's header for rows valid rows.
func (r *ring) writeHeader(i, rows int, epoch, index uint64) {
	s := r.slot(i)
	le := binary.LittleEndian
	le.PutUint32(s[0:], slotMagic)
	le.PutUint16(s[4:], slotVersion)
	s[6], s[7] = r.l.dtype, r.l.layout
	le.PutUint32(s[8:], uint32(rows))
	le.PutUint32(s[12:], uint32(r.l.batch))
	le.PutUint32(s[16:], uint32(rows))
	for k, d := range r.l.shape {
		le.PutUint32(s[20+4*k:], uint32(d))
	}
	le.PutUint64(s[32:], epoch)
	le.PutUint64(s[40:], index)
	le.PutUint64(s[48:], slotHeaderSize)
	le.PutUint64(s[56:], uint64(r.l.labelsOff))
	le.PutUint64(s[64:], uint64(r.l.idsOff))
	le.PutUint64(s[72:], uint64(r.l.posOff))
}

// Close unmaps the ring and closes its file. Safe twice.
func (r *ring) Close() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	if cerr := unix.Close(r.fd); err == nil {
		err = cerr
	}
	r.mem = nil
	return err
}
