package s3src_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/sophon-dl/sophon/internal/s3gw"
	"github.com/sophon-dl/sophon/internal/s3gw/s3gwtest"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
	"github.com/sophon-dl/sophon/storage-agent/dataset/s3src"
)

const (
	access = "sophon-test"
	secret = "sophon-test-secret"
	bucket = "data"
)

// bucketEnv is a real S3 server (versitygw) whose bucket "data" is the
// folder root/data: a dataset written to root/data/PREFIX is both a folder
// and s3://data/PREFIX.
type bucketEnv struct {
	root string
	srv  *s3gw.Server
}

func newBucketEnv(t testing.TB) *bucketEnv {
	t.Helper()
	root := t.TempDir()
	datasettest.Must(t, os.MkdirAll(filepath.Join(root, bucket), 0o755))
	return &bucketEnv{root: root, srv: s3gwtest.Start(t, root, access, secret)}
}

// dir is the folder of s3://data/prefix.
func (e *bucketEnv) dir(prefix string) string { return filepath.Join(e.root, bucket, prefix) }

// adopt moves the dataset folder src to s3://data/prefix and returns its
// new folder.
func (e *bucketEnv) adopt(t testing.TB, src, prefix string) string {
	t.Helper()
	dst := e.dir(prefix)
	datasettest.Must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	datasettest.Must(t, os.Rename(src, dst))
	return dst
}

func (e *bucketEnv) config() s3src.Config {
	return s3src.Config{Endpoint: e.srv.URL, Region: "us-east-1", Creds: credentials.NewStaticV4(access, secret, "")}
}

func (e *bucketEnv) client(t testing.TB) *minio.Client {
	u, _ := url.Parse(e.srv.URL)
	cl, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), BucketLookup: minio.BucketLookupPath, Region: "us-east-1"})
	datasettest.Must(t, err)
	return cl
}

// put uploads data as key of the bucket (the server records its ETag).
func (e *bucketEnv) put(t testing.TB, key string, data []byte) {
	t.Helper()
	_, err := e.client(t).PutObject(context.Background(), bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
	datasettest.Must(t, err)
}

func (e *bucketEnv) open(t testing.TB, prefix string, c s3src.Config) *dataset.Dataset {
	t.Helper()
	d, err := s3src.OpenDataset(context.Background(), "s3://"+bucket+"/"+prefix, c, dataset.OpenOptions{Index: "-"})
	datasettest.Must(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

// sameAsFolder checks that the bucket's dataset is the folder's: the
// fingerprint (paths, sizes, labels, content hashes), the classes and
// every sample's bytes.
func sameAsFolder(t *testing.T, fromBucket *dataset.Dataset, dir string) {
	t.Helper()
	fromDir, err := dataset.OpenWith(dir, dataset.OpenOptions{Index: "-"})
	datasettest.Must(t, err)
	defer fromDir.Close()
	if fromBucket.Fingerprint() != fromDir.Fingerprint() || fromBucket.Len() != fromDir.Len() {
		t.Fatalf("bucket: %d samples, fingerprint %s; folder: %d, %s", fromBucket.Len(), fromBucket.Fingerprint(), fromDir.Len(), fromDir.Fingerprint())
	}
	if got, want := fmt.Sprint(fromBucket.ClassNames()), fmt.Sprint(fromDir.ClassNames()); got != want {
		t.Errorf("classes %s, want %s", got, want)
	}
	for i := range fromDir.Len() {
		a, err := fromBucket.Read(i)
		datasettest.Must(t, err)
		b, err := fromDir.Read(i)
		datasettest.Must(t, err)
		if !bytes.Equal(a, b) || fromBucket.Header(i) != fromDir.Header(i) {
			t.Errorf("sample %d (%s): the bucket's bytes or header differ from the folder's", i, fromDir.Path(i))
		}
	}
}

// TestImageFolderKeys: an ImageFolder as keys is the folder's dataset.
func TestImageFolderKeys(t *testing.T) {
	e := newBucketEnv(t)
	dir := e.adopt(t, datasettest.ImageFolder(t, []string{"cat", "dog"}, 3), "train/folder")
	sameAsFolder(t, e.open(t, "train/folder", e.config()), dir)
}

// countingTransport counts the body bytes the client received.
type countingTransport struct {
	rt    http.RoundTripper
	bytes atomic.Int64
	gets  atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err == nil && r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "" && !r.URL.Query().Has("location") {
		c.gets.Add(1)
		resp.Body = &countingBody{resp.Body, &c.bytes}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// TestTarShardsRanged: tar shards as objects are the folder's dataset,
// and reading one member transfers that member, not its shard.
func TestTarShardsRanged(t *testing.T) {
	e := newBucketEnv(t)
	dir := e.adopt(t, datasettest.TarShards(t), "shards")
	ct := &countingTransport{rt: http.DefaultTransport.(*http.Transport).Clone()}
	c := e.config()
	c.Transport = ct
	d := e.open(t, "shards", c)
	sameAsFolder(t, d, dir)
	fi, err := os.Stat(filepath.Join(dir, "shard-2.tar"))
	datasettest.Must(t, err)
	const i = 7 // in shard-2.tar
	if !strings.HasPrefix(d.Path(i), "shard-2.tar/") {
		t.Fatalf("sample %d is %s", i, d.Path(i))
	}
	gets, before := ct.gets.Load(), ct.bytes.Load()
	b, err := d.Read(i)
	datasettest.Must(t, err)
	if n := ct.bytes.Load() - before; n != int64(len(b)) || ct.gets.Load()-gets != 1 {
		t.Errorf("reading a %d-byte member of a %d-byte shard took %d GETs of %d bytes, want one of %d", len(b), fi.Size(), ct.gets.Load()-gets, n, len(b))
	}
}

// TestMissingObject: an object deleted after indexing fails its reads
// (not found), the others are served.
func TestMissingObject(t *testing.T) {
	e := newBucketEnv(t)
	e.adopt(t, datasettest.ImageFolder(t, []string{"a"}, 3), "m")
	d := e.open(t, "m", e.config())
	datasettest.Must(t, e.client(t).RemoveObject(context.Background(), bucket, "m/"+d.RawPath(1), minio.RemoveObjectOptions{}))
	_, err := d.Read(1)
	if !errors.Is(err, dataset.ErrRead) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), d.Path(1)) {
		t.Fatalf("read of a deleted object: %v, want ErrRead, not found, naming it", err)
	}
	if _, err := d.Read(0); err != nil {
		t.Fatal(err)
	}
}

// TestChangedObject: an object replaced after indexing by other bytes of
// the same size fails with ErrChanged, through the server (another ETag:
// If-Match fails) or, without ETags (files written beside the server), the
// content hash.
func TestChangedObject(t *testing.T) {
	e := newBucketEnv(t)
	for i, name := range []string{"a/x.jpg", "a/y.jpg"} {
		e.put(t, "c/"+name, datasettest.JPEG(t, uint64(i+1)))
	}
	d := e.open(t, "c", e.config())
	orig, err := d.Read(0)
	datasettest.Must(t, err)
	e.put(t, "c/a/x.jpg", datasettest.SameSizeJPEG(t, orig))
	if _, err := d.Read(0); !errors.Is(err, dataset.ErrChanged) || !strings.Contains(err.Error(), "ETag") {
		t.Fatalf("read of a replaced object: %v, want ErrChanged (ETag)", err)
	}

	// No ETag: a file of the folder overwritten in place.
	dir := e.adopt(t, datasettest.ImageFolder(t, []string{"a"}, 2), "noetag")
	d = e.open(t, "noetag", e.config())
	orig, err = d.Read(1)
	datasettest.Must(t, err)
	datasettest.OverwriteAt(t, filepath.Join(dir, d.RawPath(1)), 0, datasettest.SameSizeJPEG(t, orig))
	if _, err := d.Read(1); !errors.Is(err, dataset.ErrChanged) {
		t.Fatalf("read of an object overwritten in place: %v, want ErrChanged", err)
	}
}

// TestWrongCredentials: a wrong secret fails at start with ErrAccess and
// a message saying what to check.
func TestWrongCredentials(t *testing.T) {
	e := newBucketEnv(t)
	e.adopt(t, datasettest.ImageFolder(t, []string{"a"}, 1), "w")
	c := e.config()
	c.Creds = credentials.NewStaticV4(access, "wrong", "")
	_, err := s3src.OpenDataset(context.Background(), "s3://"+bucket+"/w", c, dataset.OpenOptions{Index: "-"})
	if !errors.Is(err, s3src.ErrAccess) || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("wrong secret: %v, want ErrAccess naming the credentials", err)
	}
	_, err = s3src.OpenDataset(context.Background(), "s3://nobucket/w", e.config(), dataset.OpenOptions{Index: "-"})
	if !errors.Is(err, s3src.ErrNoBucket) {
		t.Fatalf("missing bucket: %v, want ErrNoBucket", err)
	}
}

// TestThrottled: a server answering 503 SlowDown now and then (a fault
// injector on loopback in front of the real server) slows the open and
// the reads down but fails neither.
func TestThrottled(t *testing.T) {
	e := newBucketEnv(t)
	dir := e.adopt(t, datasettest.TarShards(t), "t")
	u, _ := url.Parse(e.srv.URL)
	var slowed atomic.Int64
	var mu sync.Mutex
	n := 0
	rp := httputil.NewSingleHostReverseProxy(u)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		throttle := n <= 3 || n%6 == 0 // the first three requests, then one in six
		mu.Unlock()
		if throttle {
			slowed.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	c := e.config()
	c.Endpoint = proxy.URL
	start := time.Now()
	d := e.open(t, "t", c)
	sameAsFolder(t, d, dir)
	if slowed.Load() == 0 {
		t.Fatal("no request was throttled")
	}
	t.Logf("%d requests answered 503 SlowDown; open and reads took %v", slowed.Load(), time.Since(start))

	// Throttled past the retries: a clear error, not a hang.
	c.MaxRetries = 1
	mu.Lock()
	n = 0
	mu.Unlock()
	_, err := s3src.OpenDataset(context.Background(), "s3://"+bucket+"/t", c, dataset.OpenOptions{Index: "-"})
	if err == nil || !strings.Contains(err.Error(), "reduce your request rate") {
		t.Fatalf("throttled without retries: %v, want the SlowDown error", err)
	}
}

// TestListMany lists and indexes SOPHON_S3_MANY (default 1,000; make
// s3-many runs 10,000) small objects in pages of 1,000, and refuses more
// than MaxObjects.
func TestListMany(t *testing.T) {
	n := 1000
	if v := os.Getenv("SOPHON_S3_MANY"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		datasettest.Must(t, err)
	}
	listMany(t, n)
}

func listMany(t *testing.T, n int) {
	e := newBucketEnv(t)
	dir := e.dir("many")
	jpeg := datasettest.JPEG(t, 1)
	for i := range n {
		datasettest.WriteFile(t, filepath.Join(dir, fmt.Sprintf("c%d/%05d.jpg", i%10, i)), jpeg)
	}
	start := time.Now()
	d := e.open(t, "many", e.config())
	if d.Len() != uint64(n) || len(d.ClassNames()) != 10 {
		t.Fatalf("%d samples in %d classes, want %d in 10", d.Len(), len(d.ClassNames()), n)
	}
	t.Logf("listed and indexed %d objects in %v", n, time.Since(start))
	c := e.config()
	c.MaxObjects = n - 1
	_, err := s3src.OpenDataset(context.Background(), "s3://"+bucket+"/many", c, dataset.OpenOptions{Index: "-"})
	if !errors.Is(err, s3src.ErrTooMany) {
		t.Fatalf("MaxObjects %d of %d: %v, want ErrTooMany", n-1, n, err)
	}
}

// TestParseURL: locations and their bucket and prefix.
func TestParseURL(t *testing.T) {
	for _, tc := range []struct{ in, bucket, prefix string }{
		{"s3://b", "b", ""},
		{"s3://b/", "b", ""},
		{"s3://b/p", "b", "p/"},
		{"s3://b/p/q/", "b", "p/q/"},
	} {
		b, p, err := s3src.ParseURL(tc.in)
		if err != nil || b != tc.bucket || p != tc.prefix {
			t.Errorf("ParseURL(%q) = %q, %q, %v; want %q, %q", tc.in, b, p, err, tc.bucket, tc.prefix)
		}
	}
	for _, bad := range []string{"s3://", "s3:///p", "/data", "gs://b/p"} {
		if _, _, err := s3src.ParseURL(bad); !errors.Is(err, s3src.ErrURL) {
			t.Errorf("ParseURL(%q): %v, want ErrURL", bad, err)
		}
	}
}

// TestIndexFile: the index file spares a reopen from hashing again while
// the objects keep their key, size and ETag, and a replaced object is
// hashed again.
func TestIndexFile(t *testing.T) {
	e := newBucketEnv(t)
	for i, name := range []string{"a/x.jpg", "a/y.jpg", "b/z.jpg"} {
		e.put(t, "i/"+name, datasettest.JPEG(t, uint64(i+1)))
	}
	index := filepath.Join(t.TempDir(), "bucket.idx")
	open := func() dataset.IndexStats {
		d, err := s3src.OpenDataset(context.Background(), "s3://"+bucket+"/i", e.config(), dataset.OpenOptions{Index: index})
		datasettest.Must(t, err)
		defer d.Close()
		return d.Stats()
	}
	if st := open(); st.Hashed != 3 || st.Reused != 0 {
		t.Fatalf("first open: hashed %d, reused %d; want 3, 0", st.Hashed, st.Reused)
	}
	if st := open(); st.Hashed != 0 || st.Reused != 3 || st.IndexFile != index {
		t.Fatalf("second open: hashed %d, reused %d (index %s); want 0, 3 (%s)", st.Hashed, st.Reused, st.IndexFile, index)
	}
	e.put(t, "i/a/y.jpg", datasettest.JPEG(t, 9))
	if st := open(); st.Hashed != 1 || st.Reused != 2 {
		t.Fatalf("after a replacement: hashed %d, reused %d; want 1, 2", st.Hashed, st.Reused)
	}
}

// TestManifestOverBuckets: a manifest written from the whole dataset
// serves a bucket holding part of it (sharded placement over buckets):
// the manifest's catalog and fingerprint, the shards it lacks missing.
func TestManifestOverBuckets(t *testing.T) {
	e := newBucketEnv(t)
	whole := datasettest.TarShards(t)
	full, err := dataset.OpenWith(whole, dataset.OpenOptions{Index: "-"})
	datasettest.Must(t, err)
	man := full.Manifest()
	fp := full.Fingerprint()
	full.Close()
	part := e.dir("part")
	datasettest.Must(t, os.MkdirAll(part, 0o755))
	for _, s := range []string{"shard-1.tar", "shard-3.tar"} {
		b, err := os.ReadFile(filepath.Join(whole, s))
		datasettest.Must(t, err)
		e.put(t, "part/"+s, b)
	}
	d, err := s3src.OpenDataset(context.Background(), "s3://"+bucket+"/part", e.config(), dataset.OpenOptions{Index: "-", Manifest: man})
	datasettest.Must(t, err)
	defer d.Close()
	l, err := d.Layout(0)
	datasettest.Must(t, err)
	if d.Fingerprint() != fp || fmt.Sprint(d.MissingShards(l)) != "[0 2]" {
		t.Fatalf("fingerprint %s (want %s), missing shards %v (want [0 2])", d.Fingerprint(), fp, d.MissingShards(l))
	}
	if _, err := d.Read(0); !errors.Is(err, dataset.ErrNotStored) {
		t.Fatalf("sample of a missing shard: %v, want ErrNotStored", err)
	}
	if _, err := d.Read(3); err != nil {
		t.Fatal(err)
	}
}

// TestBodyFaults: a ranged read whose body is cut short is read again, a
// whole object's (hashing a loose sample) resumed where it stopped; a
// server that ignores Range (sending the object from its start) fails the
// read instead of serving other bytes.
func TestBodyFaults(t *testing.T) {
	e := newBucketEnv(t)
	dir := e.adopt(t, datasettest.TarShards(t), "f")
	loose := e.adopt(t, datasettest.ImageFolder(t, []string{"a", "b"}, 3), "g")
	u, _ := url.Parse(e.srv.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	var mode atomic.Int32 // 0 pass, 1 cut every other ranged body, 2 ignore Range, 3 cut every other whole object's body
	var ranged, cut, whole atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") == "" {
			if mode.Load() == 3 && r.Method == http.MethodGet && r.URL.RawQuery == "" && whole.Add(1)%2 == 1 {
				b, err := os.ReadFile(filepath.Join(e.root, filepath.FromSlash(r.URL.Path)))
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				cut.Add(1)
				w.Header().Set("Content-Length", strconv.Itoa(len(b)))
				w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
				w.WriteHeader(http.StatusOK)
				w.Write(b[:len(b)/3])    // the object's first third
				w.(http.Flusher).Flush() // the headers and a part reach the client
				panic(http.ErrAbortHandler)
			}
			rp.ServeHTTP(w, r)
			return
		}
		switch mode.Load() {
		case 1:
			if ranged.Add(1)%2 == 1 {
				cut.Add(1)
				w.Header().Set("Content-Length", "100000")
				w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
				w.Header().Set("Content-Range", strings.Replace(r.Header.Get("Range"), "=", " ", 1)+"/100000")
				w.WriteHeader(http.StatusPartialContent)
				w.Write([]byte("0123456789"))
				w.(http.Flusher).Flush()    // the headers and a part reach the client
				panic(http.ErrAbortHandler) // the connection drops mid-body
			}
		case 2: // the whole object, as a server that ignores Range sends it
			b, err := os.ReadFile(filepath.Join(e.root, filepath.FromSlash(r.URL.Path)))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
			w.Write(b)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	c := e.config()
	c.Endpoint = proxy.URL
	d := e.open(t, "f", c)
	mode.Store(1)
	sameAsFolder(t, d, dir)
	if cut.Load() == 0 {
		t.Fatal("no body was cut")
	}
	mode.Store(2)
	if _, err := d.Read(4); err == nil || !strings.Contains(err.Error(), "asked for bytes") {
		t.Fatalf("read through a server that ignores Range: %v, want the range refused", err)
	}

	mode.Store(3)
	cut.Store(0)
	g := e.open(t, "g", c)
	if skipped := len(g.Skipped()); cut.Load() == 0 || skipped != 0 {
		t.Fatalf("%d bodies cut, %d samples skipped (%v); want some cut, none skipped", cut.Load(), skipped, g.Skipped())
	}
	mode.Store(0)
	sameAsFolder(t, g, loose)
}
