package s3src_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/storage-agent/dataset/s3src"
)

// listServer is a misbehaving S3 server on loopback: it speaks enough of
// ListObjectsV2 for the client, each answer chosen by script from the
// request's number (from 1) and continuation token.
type listServer struct {
	url      string
	requests atomic.Int64
	// stalled receives the number of each request the script stalls;
	// a stalled request waits for its client to give up, or for release.
	stalled chan int
	release chan struct{}
	once    sync.Once
}

// answer is a page: the keys (below the prefix), the next continuation
// token ("" for the last page), or a stall.
type answer struct {
	keys             []string
	next             string
	stall            bool
	truncatedNoToken bool // IsTruncated true with no next token
}

const (
	listBucket = "bkt"
	listPrefix = "p/"
)

func newListServer(t *testing.T, script func(n int, token string) answer) *listServer {
	t.Helper()
	s := &listServer{stalled: make(chan int, 1000), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("list-type") != "2" || r.URL.Path != "/"+listBucket+"/" && r.URL.Path != "/"+listBucket {
			http.Error(w, "not a ListObjectsV2 request", http.StatusNotImplemented)
			return
		}
		n := int(s.requests.Add(1))
		a := script(n, r.URL.Query().Get("continuation-token"))
		if a.stall {
			s.stalled <- n
			select {
			case <-r.Context().Done():
			case <-s.release:
			}
			if r.Context().Err() != nil {
				return
			}
		}
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprint(w, listXML(a))
	}))
	t.Cleanup(func() {
		s.releaseAll()
		srv.Close()
	})
	s.url = srv.URL
	return s
}

// releaseAll lets the stalled requests answer.
func (s *listServer) releaseAll() { s.once.Do(func() { close(s.release) }) }

func listXML(a answer) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>%t</IsTruncated>`,
		listBucket, listPrefix, len(a.keys), a.next != "" || a.truncatedNoToken)
	if a.next != "" {
		fmt.Fprintf(&b, `<NextContinuationToken>%s</NextContinuationToken>`, a.next)
	}
	for _, k := range a.keys {
		fmt.Fprintf(&b, `<Contents><Key>%s%s</Key><LastModified>2024-01-02T03:04:05.000Z</LastModified><ETag>"e-%s"</ETag><Size>10</Size><StorageClass>STANDARD</StorageClass></Contents>`, listPrefix, k, k)
	}
	b.WriteString(`</ListBucketResult>`)
	return b.String()
}

// keys are n keys named from, from+1, ... in key order.
func keys(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("c/%06d.jpg", from+i)
	}
	return out
}

func (s *listServer) config() s3src.Config {
	return s3src.Config{Endpoint: s.url, Region: "us-east-1", Creds: credentials.NewStaticV4("k", "s", ""), MaxRetries: 3,
		PageTimeout: time.Minute, ListTimeout: time.Minute, ListProgress: -1}
}

// newStore connects to the server (the one-key check is request 1).
func (s *listServer) newStore(t *testing.T, c s3src.Config) *s3src.Store {
	t.Helper()
	st, err := s3src.New(context.Background(), "s3://"+listBucket+"/"+listPrefix, c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// checkListErr checks that err is want and names the bucket, the prefix
// and each of names; and that the server saw at most maxRequests.
func checkListErr(t *testing.T, s *listServer, err, want error, maxRequests int64, names ...string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
	for _, n := range append([]string{`bucket "` + listBucket + `"`, `prefix "` + listPrefix + `"`, s.url}, names...) {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not name %s", err, n)
		}
	}
	if got := s.requests.Load(); got > maxRequests {
		t.Errorf("the server saw %d list requests, want at most %d", got, maxRequests)
	}
	t.Logf("%d requests: %v", s.requests.Load(), err)
}

// TestListStalledPage: a listing whose third page never comes fails with
// ErrListTimeout at the page timeout (not the listing's deadline), naming
// the page and its token, after four requests (the check and three
// pages).
func TestListStalledPage(t *testing.T) {
	s := newListServer(t, func(n int, token string) answer {
		switch token {
		case "":
			return answer{keys: keys(0, 40), next: "t1"}
		case "t1":
			return answer{keys: keys(40, 40), next: "t2"}
		}
		return answer{stall: true}
	})
	c := s.config()
	// The pages before the stall must come within it on a loaded machine
	// (at 200 ms the first did not, once, under make test).
	c.PageTimeout = time.Second
	st := s.newStore(t, c)
	start := time.Now()
	_, err := st.List(context.Background())
	t.Logf("failed after %v", time.Since(start))
	checkListErr(t, s, err, s3src.ErrListTimeout, 4, "page 3", `continuation token "t2"`, "page timeout of 1s", "80 objects")
}

// TestListStalled: a server that answers the check and then stalls every
// page fails the listing at its deadline when that comes before the page
// timeout; one that stalls from the first request fails New at the page
// timeout, naming the first page.
func TestListStalled(t *testing.T) {
	t.Run("listing", func(t *testing.T) {
		s := newListServer(t, func(n int, token string) answer {
			if n == 1 {
				return answer{keys: keys(0, 1), next: "t1"}
			}
			return answer{stall: true}
		})
		c := s.config()
		c.ListTimeout = 300 * time.Millisecond
		st := s.newStore(t, c)
		_, err := st.List(context.Background())
		checkListErr(t, s, err, s3src.ErrListTimeout, 2, "page 1", "the listing's deadline of 300ms")
	})
	t.Run("check", func(t *testing.T) {
		s := newListServer(t, func(int, string) answer { return answer{stall: true} })
		c := s.config()
		c.PageTimeout = 200 * time.Millisecond
		_, err := s3src.New(context.Background(), "s3://"+listBucket+"/"+listPrefix, c)
		checkListErr(t, s, err, s3src.ErrListTimeout, 1, "the first page", "page timeout of 200ms")
	})
	t.Run("slow endless", func(t *testing.T) {
		// Every page comes, 50 ms late, with new keys, for ever: the
		// deadline ends it, after at most deadline/50ms requests.
		s := newListServer(t, func(n int, token string) answer {
			time.Sleep(50 * time.Millisecond) // the server's slowness, not a wait for an event
			return answer{keys: keys(n*10, 10), next: fmt.Sprintf("t%d", n)}
		})
		c := s.config()
		c.ListTimeout = 500 * time.Millisecond
		st := s.newStore(t, c)
		_, err := st.List(context.Background())
		checkListErr(t, s, err, s3src.ErrListTimeout, 1+500/50+1, "the listing's deadline of 500ms")
	})
}

// TestListRepeatedToken: a server that answers a continuation token with
// itself, with no objects (New fails on the second request) or with the
// same objects (List fails on its second page), fails with ErrListLoop
// naming the token; as does one that sends the same objects under new
// tokens (the keys do not advance), or new tokens and never an object.
func TestListRepeatedToken(t *testing.T) {
	t.Run("no objects", func(t *testing.T) {
		s := newListServer(t, func(int, string) answer { return answer{next: "T"} })
		_, err := s3src.New(context.Background(), "s3://"+listBucket+"/"+listPrefix, s.config())
		checkListErr(t, s, err, s3src.ErrListLoop, 2, `continuation token "T" again`)
	})
	t.Run("same objects", func(t *testing.T) {
		s := newListServer(t, func(int, string) answer { return answer{keys: keys(0, 40), next: "T"} })
		st := s.newStore(t, s.config())
		_, err := st.List(context.Background())
		checkListErr(t, s, err, s3src.ErrListLoop, 3, "page 2", `continuation token "T" again`, "40 objects")
	})
	t.Run("same objects new tokens", func(t *testing.T) {
		s := newListServer(t, func(n int, _ string) answer { return answer{keys: keys(0, 40), next: fmt.Sprintf("t%d", n)} })
		st := s.newStore(t, s.config())
		_, err := st.List(context.Background())
		checkListErr(t, s, err, s3src.ErrListLoop, 3, "page 2", `continuation token "t2"`, "40 objects", "does not come after")
	})
	t.Run("no objects new tokens", func(t *testing.T) {
		s := newListServer(t, func(n int, _ string) answer { return answer{next: fmt.Sprintf("t%d", n)} })
		_, err := s3src.New(context.Background(), "s3://"+listBucket+"/"+listPrefix, s.config())
		checkListErr(t, s, err, s3src.ErrListLoop, 6, "pages in a row without objects")
	})
}

// TestListCanceled: a listing waiting on a stalled page ends when its
// context does, naming the page.
func TestListCanceled(t *testing.T) {
	s := newListServer(t, func(n int, token string) answer {
		if n == 1 {
			return answer{keys: keys(0, 1), next: "t1"}
		}
		return answer{stall: true}
	})
	st := s.newStore(t, s.config())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.stalled
		cancel()
	}()
	_, err := st.List(ctx)
	checkListErr(t, s, err, context.Canceled, 2, "page 1")
}

// lineWriter sends each log line to a channel, dropping those that find
// it full.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	select {
	case w <- string(p):
	default:
	}
	return len(p), nil
}

// TestListProgress: a listing logs its progress while it waits on a page,
// naming the objects so far and the page, and finishes when the page
// comes.
func TestListProgress(t *testing.T) {
	s := newListServer(t, func(n int, token string) answer {
		switch token {
		case "":
			return answer{keys: keys(0, 40), next: "t1"}
		case "t1":
			return answer{keys: keys(40, 2), stall: n == 3}
		}
		return answer{}
	})
	logs := make(lineWriter, 100)
	c := s.config()
	c.ListProgress = 10 * time.Millisecond
	c.Logger = zerolog.New(logs)
	st := s.newStore(t, c)
	var objs int
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		o, e := st.List(context.Background())
		objs, err = len(o), e
	}()
	<-s.stalled
	for line := range logs {
		if strings.Contains(line, `"message":"listing"`) && strings.Contains(line, `"objects":40`) && strings.Contains(line, `"page":2`) {
			break
		}
	}
	s.releaseAll()
	<-done
	if err != nil || objs != 42 {
		t.Fatalf("listed %d objects, %v; want 42", objs, err)
	}
}

// TestListDefaults: by default a stalled page (and so a stalled listing)
// fails within a minute.
func TestListDefaults(t *testing.T) {
	if s3src.DefaultPageTimeout > time.Minute || s3src.DefaultPageTimeout <= 0 {
		t.Errorf("DefaultPageTimeout %v, want at most a minute", s3src.DefaultPageTimeout)
	}
	if s3src.DefaultListTimeout < s3src.DefaultPageTimeout {
		t.Errorf("DefaultListTimeout %v is below DefaultPageTimeout %v", s3src.DefaultListTimeout, s3src.DefaultPageTimeout)
	}
}

// TestListTruncatedWithoutToken: a page that says it is truncated but
// gives no continuation token fails the listing after one request, with
// the client's error (no claim that a token came again).
func TestListTruncatedWithoutToken(t *testing.T) {
	s := newListServer(t, func(int, string) answer { return answer{keys: keys(0, 3), truncatedNoToken: true} })
	_, err := s3src.New(context.Background(), "s3://"+listBucket+"/"+listPrefix, s.config())
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "continuation token") || strings.Contains(err.Error(), "again") || s.requests.Load() != 1 {
		t.Fatalf("truncated without a token: %v after %d requests, want an error after 1", err, s.requests.Load())
	}
}
