package dataset

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// DefaultProgress is how often indexing logs its progress when
// OpenOptions.Progress is zero.
const DefaultProgress = 5 * time.Second

// progress logs the progress of one phase of indexing (listing a folder's
// files, hashing the samples the index file lacks) every interval while the
// phase runs: files and bytes done (of the total, when known), files/s,
// bytes/s and, with a total, an ETA. A phase shorter than one interval logs
// nothing. Workers call add from any
// goroutine; the reporting goroutine is the progress's own and end waits
// for it.
type progress struct {
	log        zerolog.Logger
	phase      string
	totalFiles int64
	totalBytes int64
	start      time.Time
	files      atomic.Int64
	bytes      atomic.Int64
	stop       chan struct{}
	wg         sync.WaitGroup
	lines      int // lines logged, read after end
}

// startProgress starts reporting a phase of totalFiles files of totalBytes
// bytes (zero: unknown, no ETA); every zero means DefaultProgress, negative
// never.
func startProgress(log zerolog.Logger, phase string, every time.Duration, totalFiles, totalBytes int64) *progress {
	p := &progress{log: log, phase: phase, totalFiles: totalFiles, totalBytes: totalBytes, start: time.Now(), stop: make(chan struct{})}
	if every == 0 {
		every = DefaultProgress
	}
	if every < 0 {
		return p
	}
	p.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case now := <-t.C:
				p.report(now)
			}
		}
	})
	return p
}

// add counts one more file of n bytes done.
func (p *progress) add(n int64) {
	p.files.Add(1)
	p.bytes.Add(n)
}

// end stops the reporting and, when the phase logged progress, logs its
// last line: what it did and how long it took.
func (p *progress) end() {
	close(p.stop)
	p.wg.Wait()
	if p.lines > 0 {
		p.report(time.Now())
	}
}

// report logs one progress line at now.
func (p *progress) report(now time.Time) {
	p.lines++
	r := rates(p.files.Load(), p.bytes.Load(), p.totalFiles, p.totalBytes, now.Sub(p.start))
	ev := p.log.Info().Str("phase", p.phase).Int64("files", r.files).Int64("bytes", r.bytes)
	if p.totalFiles > 0 {
		ev = ev.Int64("files_total", p.totalFiles).Int64("bytes_total", p.totalBytes)
	}
	ev = ev.Float64("files_per_s", round1(r.filesPerS)).Float64("bytes_per_s", round1(r.bytesPerS)).
		Str("elapsed", r.elapsed.Round(time.Second).String())
	if r.eta >= 0 {
		ev = ev.Str("eta", r.eta.Round(time.Second).String())
	}
	ev.Msg("indexing progress")
}

// progressRates is what one progress line says.
type progressRates struct {
	files, bytes         int64
	filesPerS, bytesPerS float64
	elapsed              time.Duration
	// eta is the time left at the rate so far; negative when unknown (no
	// total, or nothing done yet).
	eta time.Duration
}

// rates computes a progress line from what is done of the totals after
// elapsed. The ETA follows bytes when the byte total is known (samples
// differ in size), else files.
func rates(files, bytes, totalFiles, totalBytes int64, elapsed time.Duration) progressRates {
	r := progressRates{files: files, bytes: bytes, elapsed: elapsed, eta: -1}
	s := elapsed.Seconds()
	if s <= 0 {
		return r
	}
	r.filesPerS, r.bytesPerS = float64(files)/s, float64(bytes)/s
	switch {
	case totalBytes > 0 && bytes > 0:
		r.eta = time.Duration(float64(max(totalBytes-bytes, 0)) / r.bytesPerS * float64(time.Second))
	case totalFiles > 0 && files > 0:
		r.eta = time.Duration(float64(max(totalFiles-files, 0)) / r.filesPerS * float64(time.Second))
	}
	return r
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
