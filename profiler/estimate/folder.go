package estimate

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/profiler"
)

// headerPrefix is how much of a file ScanFolder reads for its header
// first; a header longer than that (large APP segments) is read whole.
const headerPrefix = 64 << 10

// ScanFolder lists an ImageFolder tree as the storage agent's catalog
// does: each subdirectory of dir is a class (sorted by name), the *.jpg
// and *.jpeg files below it (any case) its samples in path order, ids
// 0..n-1 in class and then path order. It reads each file's size and JPEG
// header only. A file whose header does not parse keeps its id but is left
// out of samples and counted in skipped, as stage 2 leaves out a sample
// the pipeline fails on; paths[i] is samples[i]'s file. NB: it walks real folders with filepath.WalkDir and follows no
// symlink, a simplification of the agent's catalog; a catalog's own ids,
// sizes and headers should be used where there is one.
func ScanFolder(dir string) (samples []Sample, paths []string, skipped int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("estimate: %w", err)
	}
	var next uint64
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		var files []string
		err := filepath.WalkDir(filepath.Join(dir, e.Name()), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			ext := strings.ToLower(filepath.Ext(path))
			if d.Type().IsRegular() && (ext == ".jpg" || ext == ".jpeg") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, nil, 0, fmt.Errorf("estimate: %w", err)
		}
		slices.Sort(files)
		for _, path := range files {
			id := next
			next++
			raw, h, err := readHeader(path)
			if err != nil {
				skipped++
				continue
			}
			samples = append(samples, FromHeader(id, raw, h))
			paths = append(paths, path)
		}
	}
	return samples, paths, skipped, nil
}

// readHeader returns the file's size and JPEG header.
func readHeader(path string) (int64, jpeg.Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, jpeg.Header{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, jpeg.Header{}, err
	}
	buf := make([]byte, min(fi.Size(), headerPrefix))
	if _, err := io.ReadFull(f, buf); err != nil {
		return 0, jpeg.Header{}, err
	}
	h, err := jpeg.ReadHeader(buf)
	if errors.Is(err, jpeg.ErrTruncated) && fi.Size() > headerPrefix {
		if buf, err = os.ReadFile(path); err != nil {
			return 0, jpeg.Header{}, err
		}
		h, err = jpeg.ReadHeader(buf)
	}
	return fi.Size(), h, err
}

// Pick chooses up to n calibration samples spread over the dataset's image
// sizes: the samples at evenly spaced quantiles of pixels (ties broken by
// raw size, then id), plus, when the dataset mixes decode classes
// (progressive, grey), up to minClass of each class's, so that each gets
// its own decode fit. It returns indices into samples, in order.
func Pick(samples []Sample, n int) []int {
	if n <= 0 || len(samples) == 0 {
		return nil
	}
	idx := make([]int, len(samples))
	for i := range idx {
		idx[i] = i
	}
	key := func(s Sample) [3]int64 { return [3]int64{int64(s.W) * int64(s.H), s.Raw, int64(s.ID)} }
	slices.SortFunc(idx, func(a, b int) int {
		ka, kb := key(samples[a]), key(samples[b])
		return slices.Compare(ka[:], kb[:])
	})
	chosen := map[int]bool{}
	n = min(n, len(samples))
	for q := range n {
		chosen[idx[(2*q+1)*len(idx)/(2*n)]] = true
	}
	perClass := map[int]int{}
	for i := range chosen {
		perClass[class(samples[i])]++
	}
	for _, i := range idx {
		c := class(samples[i])
		if !chosen[i] && perClass[c] < minClass {
			chosen[i] = true
			perClass[c]++
		}
	}
	out := make([]int, 0, len(chosen))
	for i := range chosen {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

func class(s Sample) int {
	c := 0
	if s.Progressive {
		c |= 1
	}
	if s.Components == 1 {
		c |= 2
	}
	return c
}

// FromFolder estimates the profile of an ImageFolder tree for p with the
// crop boxes of (seed, epoch), calibrated on up to calibrate of its files
// (see Pick), under lim (the agents' limits, e.g. ops.DefaultLimits():
// files they refuse are neither run nor priced, and count as skipped). It
// returns the profile and how many files were skipped.
func FromFolder(p *ops.Pipeline, dir string, seed, epoch uint64, calibrate int, lim ops.Limits) (*profiler.Profile, int, error) {
	samples, paths, skipped, err := ScanFolder(dir)
	if err != nil {
		return nil, skipped, err
	}
	if len(samples) == 0 {
		return nil, skipped, fmt.Errorf("estimate: no JPEG with a readable header under %s", dir)
	}
	n := len(samples)
	samples = slices.DeleteFunc(samples, func(s Sample) bool { return p.CheckHeader(s.ID, s.Header(), lim) != nil })
	skipped += n - len(samples)
	if len(samples) == 0 {
		return nil, skipped, fmt.Errorf("estimate: the limits refuse every JPEG under %s (%d)", dir, n)
	}
	var cal []Calibrated
	for _, i := range Pick(samples, calibrate) {
		data, err := os.ReadFile(paths[i])
		if err != nil {
			return nil, skipped, fmt.Errorf("estimate: %w", err)
		}
		cal = append(cal, Calibrated{Sample: samples[i], Data: data})
	}
	m, err := Calibrate(p, seed, epoch, cal, lim, 0)
	if err != nil {
		return nil, skipped, err
	}
	prof, err := m.Profile("", samples)
	return prof, skipped, err
}
