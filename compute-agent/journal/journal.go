// Package journal is the compute agent's sample log and resume state:
// one line per delivered sample, appended per consumed batch, and with a
// state directory the run's identity and its completed epochs, so that a
// restarted agent delivers each sample of an epoch exactly once.
package journal

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// ErrUnresumable marks a state directory or sample journal that cannot be
// resumed: another run's, or corrupt.
var ErrUnresumable = errors.New("journal: cannot resume")

// ErrClosed: the journal was closed (the agent was closed).
var ErrClosed = errors.New("journal: closed")

// Journal is the sample log itself (Config.SamplesOut, or
// StateDir/samples): one line "epoch sample sha256hex\n" per delivered
// sample, appended with one write(2) per batch right after the consumer
// took the batch. So the log a crash leaves behind is exactly what was
// delivered, up to the last batch: a batch consumed but not yet written is
// delivered again after a restart (and logged once); a line torn by a kill
// during the write is cut off on open and its sample delivered again.
// StateDir also holds run.json (the run's identity and where in the log
// this run starts) and epochs (one line per completed epoch).
type Journal struct {
	mu   sync.Mutex
	f    *os.File // the sample log, O_APPEND
	dir  string   // StateDir; empty without
	buf  []byte
	done map[uint64]bool              // epochs completed (StateDir)
	have map[uint64]map[uint64]string // epoch -> sample -> sha hex, journaled before this start
}

// RunState is StateDir/run.json: what must match for a journal to be
// resumed, and where this run's part of the sample log starts.
type RunState struct {
	Version     int    `json:"version"`
	Seed        uint64 `json:"seed"`
	Fingerprint string `json:"fingerprint"`
	Pipeline    string `json:"pipeline"`
	Plan        string `json:"plan"`
	Rank        int    `json:"rank"`
	World       int    `json:"world"`
	FirstEpoch  uint64 `json:"first_epoch"`
	FetchOnly   bool   `json:"fetch_only,omitempty"`
	Samples     string `json:"samples"` // the sample log's absolute path
	Offset      int64  `json:"offset"`  // its size when the run began
}

// Open opens the sample log and, with a state dir, checks or
// creates the run's identity and reads back what was delivered.
func Open(samples, dir string, id RunState) (*Journal, error) {
	if samples == "" {
		samples = filepath.Join(dir, "samples")
	}
	abs, err := filepath.Abs(samples)
	if err != nil {
		return nil, err
	}
	j := &Journal{dir: dir, done: map[uint64]bool{}, have: map[uint64]map[uint64]string{}}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	j.f = f
	if dir == "" {
		return j, nil
	}
	if err := j.resume(abs, id); err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
}

// resume checks run.json against id (creating it on a fresh start), cuts
// a torn last line off the sample log and reads back this run's lines and
// the completed epochs.
func (j *Journal) resume(samples string, id RunState) error {
	id.Version, id.Samples = 1, samples
	st, err := j.f.Stat()
	if err != nil {
		return err
	}
	path := filepath.Join(j.dir, "run.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		id.Offset = st.Size()
		b, err := json.MarshalIndent(id, "", "  ")
		if err != nil {
			return err
		}
		// Written whole or not at all: a crash here leaves no run.json.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	if err != nil {
		return err
	}
	var was RunState
	if err := json.Unmarshal(b, &was); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnresumable, path, err)
	}
	off := was.Offset
	was.Offset = 0
	if was != id {
		return fmt.Errorf("%w: %s is another run's: it has %+v, this run is %+v; use another --state-dir or remove it", ErrUnresumable, j.dir, was, id)
	}
	if st.Size() < off {
		return fmt.Errorf("%w: %s is shorter (%d bytes) than when the run began (%d)", ErrUnresumable, samples, st.Size(), off)
	}
	tail := make([]byte, st.Size()-off)
	if _, err := j.f.ReadAt(tail, off); err != nil && err != io.EOF {
		return err
	}
	recs, n, err := decode(tail)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnresumable, samples, err)
	}
	if n < len(tail) {
		// A torn last record: its sample was not journaled, so it is
		// delivered again; cut it off so the log stays line-structured.
		if err := j.f.Truncate(off + int64(n)); err != nil {
			return err
		}
	}
	for _, r := range recs {
		m := j.have[r.epoch]
		if m == nil {
			m = map[uint64]string{}
			j.have[r.epoch] = m
		}
		if _, dup := m[r.sample]; dup {
			return fmt.Errorf("%w: %s: epoch %d sample %d twice", ErrUnresumable, samples, r.epoch, r.sample)
		}
		m[r.sample] = r.sha
	}
	eb, err := os.ReadFile(filepath.Join(j.dir, "epochs"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for len(eb) > 0 {
		i := bytes.IndexByte(eb, '\n')
		if i < 0 {
			break // torn: the epoch's completion was not recorded
		}
		e, err := strconv.ParseUint(string(eb[:i]), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: epochs: %q", ErrUnresumable, eb[:i])
		}
		j.done[e] = true
		eb = eb[i+1:]
	}
	return nil
}

// record is one line of the sample log.
type record struct {
	epoch, sample uint64
	sha           string
}

// decode parses sample-log lines. It stops before a last line
// without its newline (a torn write) and returns the length of the
// complete lines; a complete line that does not parse is an error.
func decode(b []byte) (recs []record, n int, err error) {
	for n < len(b) {
		i := bytes.IndexByte(b[n:], '\n')
		if i < 0 {
			return recs, n, nil
		}
		line := b[n : n+i]
		f := bytes.Fields(line)
		if len(f) != 3 || len(f[2]) != 64 || len(line) != len(f[0])+len(f[1])+len(f[2])+2 {
			return nil, 0, fmt.Errorf("line at byte %d: %q", n, line)
		}
		e, err1 := strconv.ParseUint(string(f[0]), 10, 64)
		s, err2 := strconv.ParseUint(string(f[1]), 10, 64)
		_, err3 := hex.DecodeString(string(f[2]))
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, 0, fmt.Errorf("line at byte %d: %q: %v", n, line, err)
		}
		recs = append(recs, record{e, s, string(f[2])})
		n += i + 1
	}
	return recs, n, nil
}

// Complete reports whether epoch was completed before this start.
func (j *Journal) Complete(epoch uint64) bool {
	if j == nil {
		return false
	}
	return j.done[epoch]
}

// Delivered is the samples of epoch journaled before this start.
func (j *Journal) Delivered(epoch uint64) map[uint64]string {
	if j == nil {
		return nil
	}
	return j.have[epoch]
}

// Write journals a consumed batch in one write(2).
func (j *Journal) Write(epoch uint64, samples []uint64, shas [][32]byte) error {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return ErrClosed
	}
	j.buf = j.buf[:0]
	for i, s := range samples {
		j.buf = fmt.Appendf(j.buf, "%d %d %x\n", epoch, s, shas[i])
	}
	_, err := j.f.Write(j.buf)
	return err
}

// EpochDone records that epoch completed.
func (j *Journal) EpochDone(epoch uint64) error {
	if j == nil || j.dir == "" {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(j.dir, "epochs"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d\n", epoch)
	return errors.Join(err, f.Close())
}

// Close closes the sample log; safe on nil and twice.
func (j *Journal) Close() error {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}
