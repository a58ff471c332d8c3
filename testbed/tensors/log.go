// Package tensors is what the compute agents delivered, as their
// --samples-out logs record it (each (epoch, sample)'s tensor hash), and
// how a lossy pipeline's delivered tensors compare with a lossless
// pipeline's for the same keys (Compare: PSNR and max abs error).
package tensors

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Log is what one or more --samples-out files hold: each (epoch,
// sample)'s tensor hash, the samples per epoch, and the lines that
// repeated an (epoch, sample) already seen.
type Log struct {
	// Got maps (epoch, sample) to its tensor's sha256, hex.
	Got      map[[2]uint64]string
	PerEpoch map[uint64]int
	Dups     int
}

// Read reads --samples-out files (lines "epoch sample sha256"),
// together: a sample two files both hold counts as a duplicate. A missing
// file reads as none.
func Read(paths ...string) (Log, error) {
	l := Log{Got: map[[2]uint64]string{}, PerEpoch: map[uint64]int{}}
	for _, path := range paths {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return l, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) != 3 {
				continue
			}
			ep, err1 := strconv.ParseUint(fields[0], 10, 64)
			id, err2 := strconv.ParseUint(fields[1], 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			k := [2]uint64{ep, id}
			if _, ok := l.Got[k]; ok {
				l.Dups++
				continue
			}
			l.Got[k] = fields[2]
			l.PerEpoch[ep]++
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return l, fmt.Errorf("%s: %w", path, err)
		}
	}
	return l, nil
}
