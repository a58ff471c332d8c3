package s3src

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// Bounds of a listing (see [Config]).
const (
	// DefaultPageTimeout bounds one list request, its retries included:
	// what ends a stalled listing.
	DefaultPageTimeout = 30 * time.Second
	// DefaultListTimeout bounds a whole listing: the default
	// DefaultMaxObjects keys are 4,200 pages, 7 to 10 minutes at S3's
	// 100 to 150 ms a page.
	DefaultListTimeout = 15 * time.Minute
	// DefaultListProgress is how often a listing logs its progress.
	DefaultListProgress = 5 * time.Second
	// maxEmptyPages bounds the pages in a row that bring no object but a
	// new continuation token (S3 may answer a few such pages where many
	// keys were deleted; a server that does so forever loops).
	maxEmptyPages = 5
	// maxPageBytes bounds one list answer (1,000 keys take about 300 KB).
	maxPageBytes = 32 << 20
)

// Errors of a listing.
var (
	// ErrListTimeout: a list request got no answer within the page
	// timeout, or the whole listing outlasted its deadline.
	ErrListTimeout = errors.New("s3src: listing timed out")
	// ErrListLoop: the server's pages do not advance: a continuation token
	// answered twice, more than maxEmptyPages pages in a row without
	// objects, or a key that does not come after the one before it (S3
	// lists in key order).
	ErrListLoop = errors.New("s3src: listing does not advance")
)

// Causes that end a listing's context.
var (
	errListDeadline = errors.New("s3src: listing deadline")
	errStoreClosed  = errors.New("s3src: store closed")
	errEnough       = errors.New("s3src: enough objects")
)

// listingKey keys a request's *listing in its context.
type listingKey struct{}

// listing is one listing's state, shared by the loop that takes its
// objects and the transport that sends its requests ([guard]): the client
// pages by itself, so only the transport sees each page's continuation
// token and answer.
type listing struct {
	s       *Store
	cancel  context.CancelCauseFunc
	started time.Time

	mu       sync.Mutex
	page     int       // the page asked for now, from 1
	token    string    // the continuation token it was asked with
	answered bool      // the page got its answer: the next request starts a page
	deadline time.Time // the page's: its requests and their retries
	tokens   map[string]bool
	empty    int // pages in a row without objects
	objects  int // objects taken so far
	requests int
}

// where names the listing and the page in flight, for errors and logs.
func (l *listing) where() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.whereLocked()
}

func (l *listing) whereLocked() string {
	tok := "the first page"
	if l.token != "" {
		tok = fmt.Sprintf("continuation token %q", l.token)
	}
	return fmt.Sprintf("bucket %q prefix %q at %s: page %d (%s), %d objects and %d requests so far",
		l.s.bucket, l.s.prefix, l.s.endpoint, max(l.page, 1), tok, l.objects, l.requests)
}

// fail ends the listing with err (the client's retries end with it).
func (l *listing) fail(err error) error {
	l.cancel(err)
	return err
}

// guard is the transport of a [Store]'s client: a request of a listing
// (its context holds the *listing) is bounded by its page's deadline, and
// a page's answer is checked for progress before the client reads it.
type guard struct{ next http.RoundTripper }

func (g guard) RoundTrip(req *http.Request) (*http.Response, error) {
	l, ok := req.Context().Value(listingKey{}).(*listing)
	if !ok {
		return g.next.RoundTrip(req)
	}
	return l.roundTrip(g.next, req)
}

// startRequest counts a request and, when the page before it was
// answered, starts the next page with its own deadline.
func (l *listing) startRequest(req *http.Request) (deadline time.Time, token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests++
	if l.page == 0 || l.answered {
		l.page++
		l.token = req.URL.Query().Get("continuation-token")
		l.answered = false
		l.deadline = time.Now().Add(l.s.pageTimeout)
	}
	return l.deadline, l.token
}

func (l *listing) roundTrip(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	deadline, token := l.startRequest(req)
	ctx, cancel := context.WithDeadline(req.Context(), deadline)
	resp, err := next.RoundTrip(req.WithContext(ctx))
	if err == nil && resp.StatusCode == http.StatusOK && req.URL.Query().Get("list-type") == "2" {
		var body []byte
		body, err = io.ReadAll(io.LimitReader(resp.Body, maxPageBytes+1))
		resp.Body.Close()
		if err == nil {
			resp.Body = io.NopCloser(bytes.NewReader(body))
			err = l.answer(body, token)
		}
	}
	if err == nil {
		resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil
	}
	cancel()
	if ctx.Err() == context.DeadlineExceeded && req.Context().Err() == nil {
		return nil, l.fail(fmt.Errorf("%w: %s: no answer within the page timeout of %v (--s3-page-timeout)", ErrListTimeout, l.where(), l.s.pageTimeout))
	}
	return nil, err
}

// answer checks a page's answer: it must hold objects, or end the
// listing, or bring a continuation token not seen before.
func (l *listing) answer(body []byte, token string) error {
	if len(body) > maxPageBytes {
		return l.fail(fmt.Errorf("s3src: list %s: the answer is over %d bytes", l.where(), maxPageBytes))
	}
	p, err := parsePage(body)
	if err != nil {
		return nil // the client reports it
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answered = true
	if !p.truncated || p.next == "" { // the client refuses a truncated page without a token
		return nil
	}
	if l.tokens[p.next] || p.next == token {
		return l.fail(fmt.Errorf("%w: %s: the server answered continuation token %q again (%d objects on this page)", ErrListLoop, l.whereLocked(), p.next, p.keys))
	}
	l.tokens[p.next] = true
	if l.empty = l.empty + 1; p.keys > 0 {
		l.empty = 0
	}
	if l.empty > maxEmptyPages {
		return l.fail(fmt.Errorf("%w: %s: %d pages in a row without objects, next continuation token %q", ErrListLoop, l.whereLocked(), l.empty, p.next))
	}
	return nil
}

// cancelBody ends a request's deadline when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// page is what a listing checks of a ListObjectsV2 answer.
type page struct {
	truncated bool
	next      string // the continuation token of the next page
	keys      int    // objects on this page
}

// listResult is the part of a ListBucketResult (ListObjectsV2) that
// parsePage reads.
type listResult struct {
	XMLName               xml.Name   `xml:"ListBucketResult"`
	IsTruncated           bool       `xml:"IsTruncated"`
	NextContinuationToken string     `xml:"NextContinuationToken"`
	Contents              []struct{} `xml:"Contents"`
}

// parsePage reads a ListObjectsV2 answer.
func parsePage(b []byte) (page, error) {
	var r listResult
	if err := xml.Unmarshal(b, &r); err != nil {
		return page{}, fmt.Errorf("s3src: list answer: %w", err)
	}
	return page{truncated: r.IsTruncated, next: r.NextContinuationToken, keys: len(r.Contents)}, nil
}

// each lists the prefix page by page (maxKeys a request), calling fn with
// each object in key order; an error of fn ends the listing (errEnough
// with no error). The listing ends with Config.ListTimeout, each page with
// Config.PageTimeout, and logs its progress every Config.ListProgress.
func (s *Store) each(ctx context.Context, maxKeys int, fn func(minio.ObjectInfo) error) error {
	l := &listing{s: s, started: time.Now(), tokens: map[string]bool{}}
	ctx, cancelDeadline := context.WithTimeoutCause(ctx, s.listTimeout, errListDeadline)
	defer cancelDeadline()
	ctx, l.cancel = context.WithCancelCause(ctx)
	defer l.cancel(nil)
	stop := context.AfterFunc(s.ctx, func() { l.cancel(errStoreClosed) })
	defer stop()
	defer l.logProgress(ctx)()
	ctx = context.WithValue(ctx, listingKey{}, l)
	noOwner := false
	var last string
	for o := range s.cl.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, Recursive: true, MaxKeys: maxKeys, FetchOwner: &noOwner}) {
		if o.Err != nil {
			return l.err(ctx, o.Err)
		}
		l.mu.Lock()
		n := l.objects
		l.mu.Unlock()
		if n > 0 && o.Key <= last {
			return fmt.Errorf("%w: %s: key %q does not come after %q", ErrListLoop, l.where(), o.Key, last)
		}
		l.mu.Lock()
		l.objects++
		l.mu.Unlock()
		last = o.Key
		if err := fn(o); errors.Is(err, errEnough) {
			return nil
		} else if err != nil {
			return err
		}
	}
	if ctx.Err() != nil { // the client's pages end silently with their context
		return l.err(ctx, ctx.Err())
	}
	if maxKeys > 1 {
		l.mu.Lock()
		s.log.Info().Str("store", s.name).Int("objects", l.objects).Int("pages", l.page).Int("requests", l.requests).
			Dur("took", time.Since(l.started)).Msg("listed")
		l.mu.Unlock()
	}
	return nil
}

// err is the error that ended the listing: its context's cause when it
// ended, else err (a refusal, a missing bucket, retries spent).
func (l *listing) err(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return l.s.wrap(err, "list")
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errListDeadline):
		return fmt.Errorf("%w: %s: the listing's deadline of %v passed (--s3-list-timeout)", ErrListTimeout, l.where(), l.s.listTimeout)
	case errors.Is(cause, errStoreClosed):
		// NB: wraps context.Canceled: a store closes when whoever opened
		// it gave up (an agent interrupted while it opens its dataset
		// closes the store, which may end the listing before the
		// context it passed in does), and the caller asks errors.Is.
		return fmt.Errorf("s3src: list %s: the store was closed: %w", l.where(), context.Canceled)
	case errors.Is(cause, context.Canceled), errors.Is(cause, context.DeadlineExceeded):
		return fmt.Errorf("s3src: list %s: %w", l.where(), cause)
	default: // failed by the transport, already naming the listing
		return cause
	}
}

// logProgress logs the listing's progress every Config.ListProgress until
// the function it returns is called.
func (l *listing) logProgress(ctx context.Context) func() {
	every := l.s.progress
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				l.mu.Lock()
				waiting := time.Until(l.deadline).Round(time.Millisecond)
				l.s.log.Info().Str("store", l.s.name).Int("objects", l.objects).Int("page", l.page).Int("requests", l.requests).
					Str("token", l.token).Dur("elapsed", time.Since(l.started)).Dur("page_deadline_in", waiting).Msg("listing")
				l.mu.Unlock()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// isFolder says whether a key is a folder marker.
func isFolder(key string) bool { return strings.HasSuffix(key, "/") }
