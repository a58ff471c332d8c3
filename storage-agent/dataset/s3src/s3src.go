// Package s3src provides datasets in S3-compatible object stores
// (Amazon S3, MinIO, Ceph RGW, SeaweedFS, GCS's S3 interface, versitygw):
// a [dataset.Store] over a bucket and prefix, with the credentials, region
// and endpoint taken the way AWS tools take them, paginated and bounded
// listing, and ranged reads retried with back-off and jitter on throttling
// and server errors (the minio-go client).
package s3src

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/storage-agent/dataset"
)

// Scheme starts a dataset location that names an object store:
// s3://BUCKET/PREFIX.
const Scheme = "s3://"

// Defaults of [Config].
const (
	DefaultMaxObjects     = 4 << 20
	DefaultMaxRetries     = 10
	DefaultRequestTimeout = 2 * time.Minute
	// listPage is the keys asked for per list request (S3's maximum).
	listPage = 1000
)

// Errors of the store.
var (
	// ErrURL: the location is no s3://BUCKET/PREFIX.
	ErrURL = errors.New("s3src: bad location")
	// ErrTooMany: the prefix holds more objects than Config.MaxObjects.
	ErrTooMany = errors.New("s3src: too many objects")
	// ErrAccess: the server refused the credentials or the request (a
	// wrong key or secret, an expired token, no s3:ListBucket or
	// s3:GetObject).
	ErrAccess = errors.New("s3src: access denied")
	// ErrNoBucket: the bucket does not exist.
	ErrNoBucket = errors.New("s3src: no such bucket")
)

// Config configures a [Store]. The zero value follows the environment.
type Config struct {
	// Endpoint is the server's URL (http://host:port for a local server).
	// Empty means AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else
	// Amazon S3 (https://s3.amazonaws.com, the region's endpoint found by
	// the client).
	Endpoint string
	// Region is the bucket's region. Empty means AWS_REGION, else
	// AWS_DEFAULT_REGION, else the client asks the server (S3), or
	// us-east-1 with an Endpoint.
	Region string
	// Addressing is "path" (http://host/bucket/key), "virtual"
	// (http://bucket.host/key) or "auto". Empty means "path" with an
	// Endpoint (S3-compatible servers) and "auto" for Amazon S3.
	Addressing string
	// Creds are the credentials. Nil means the AWS chain: the environment
	// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), then
	// the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, else
	// ~/.aws/credentials) with the profile AWS_PROFILE (else "default"),
	// then the instance's or container's role (IAM, web identity); none
	// of them means anonymous requests.
	Creds *credentials.Credentials
	// MaxObjects bounds the objects a listing returns; more fails with
	// ErrTooMany. Zero means DefaultMaxObjects.
	MaxObjects int
	// MaxRetries bounds the tries of one request on throttling (503
	// SlowDown, 429) and server errors (5xx), with exponential back-off
	// and full jitter (200 ms doubling to 1 s). Zero means
	// DefaultMaxRetries; 1 means no retry.
	MaxRetries int
	// RequestTimeout bounds one request, its retries included. Zero means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// PageTimeout bounds one list request, its retries included: a
	// stalled listing fails with ErrListTimeout naming the page. Zero
	// means DefaultPageTimeout (30 s).
	PageTimeout time.Duration
	// ListTimeout bounds a whole listing (and the one-key check of New).
	// Zero means DefaultListTimeout (15 min).
	ListTimeout time.Duration
	// ListProgress is how often a listing logs its progress (objects,
	// pages, requests, the page in flight) to Logger. Zero means
	// DefaultListProgress (5 s); negative never.
	ListProgress time.Duration
	// Logger receives the listings' progress. The zero value writes
	// nothing.
	Logger zerolog.Logger
	// Transport carries the requests. Nil means a clone of
	// http.DefaultTransport.
	Transport http.RoundTripper
}

// IsURL says whether a --data location names an object store.
func IsURL(loc string) bool { return strings.HasPrefix(loc, Scheme) }

// ParseURL splits s3://BUCKET/PREFIX; the prefix is empty or ends in a
// slash.
func ParseURL(loc string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(loc, Scheme)
	if !ok {
		return "", "", fmt.Errorf("%w: %q does not start with %s", ErrURL, loc, Scheme)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%w: %q names no bucket", ErrURL, loc)
	}
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		prefix += "/"
	}
	return bucket, prefix, nil
}

// Store is a bucket and prefix as a [dataset.Store].
type Store struct {
	name           string
	bucket, prefix string
	endpoint       string
	cl             *minio.Client
	core           minio.Core
	maxObjects     int
	timeout        time.Duration
	pageTimeout    time.Duration
	listTimeout    time.Duration
	progress       time.Duration
	log            zerolog.Logger
	ctx            context.Context
	cancel         context.CancelFunc
}

var _ dataset.Store = (*Store)(nil)

// New connects to the bucket of loc (s3://BUCKET/PREFIX) and checks, with
// one list request, that it exists and that the credentials may list it:
// wrong credentials fail here with ErrAccess, a missing bucket with
// ErrNoBucket. The check is a listing: bounded by ctx, Config.PageTimeout
// and Config.ListTimeout.
func New(ctx context.Context, loc string, c Config) (*Store, error) {
	bucket, prefix, err := ParseURL(loc)
	if err != nil {
		return nil, err
	}
	opts, endpoint, err := c.clientOptions()
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(endpoint) // checked by clientOptions
	cl, err := minio.New(u.Host, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: endpoint %s: %w", ErrURL, endpoint, err)
	}
	s := &Store{name: Scheme + bucket + "/" + prefix, bucket: bucket, prefix: prefix, endpoint: endpoint, cl: cl, core: minio.Core{Client: cl},
		maxObjects: orDefault(c.MaxObjects, DefaultMaxObjects), timeout: orDefault(c.RequestTimeout, DefaultRequestTimeout),
		pageTimeout: orDefault(c.PageTimeout, DefaultPageTimeout), listTimeout: orDefault(c.ListTimeout, DefaultListTimeout),
		progress: c.ListProgress, log: c.Logger}
	if s.progress == 0 {
		s.progress = DefaultListProgress
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// One answer is the check.
	if err := s.each(ctx, 1, func(minio.ObjectInfo) error { return errEnough }); err != nil {
		s.cancel()
		return nil, err
	}
	return s, nil
}

// orDefault is v, or def when v is zero or negative.
func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// clientOptions resolves the endpoint, region, addressing and credentials.
func (c Config) clientOptions() (*minio.Options, string, error) {
	endpoint := firstOf(c.Endpoint, os.Getenv("AWS_ENDPOINT_URL_S3"), os.Getenv("AWS_ENDPOINT_URL"))
	custom := endpoint != ""
	if !custom {
		endpoint = "https://s3.amazonaws.com"
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", fmt.Errorf("%w: endpoint %q is no http(s)://host[:port] URL", ErrURL, endpoint)
	}
	region := firstOf(c.Region, os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION"))
	if region == "" && custom {
		region = "us-east-1"
	}
	lookup := minio.BucketLookupAuto
	switch a := firstOf(c.Addressing, map[bool]string{true: "path", false: "auto"}[custom]); a {
	case "path":
		lookup = minio.BucketLookupPath
	case "virtual":
		lookup = minio.BucketLookupDNS
	case "auto":
	default:
		return nil, "", fmt.Errorf("%w: addressing %q is none of path, virtual, auto", ErrURL, a)
	}
	creds := c.Creds
	if creds == nil {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
			&credentials.IAM{},
		})
	}
	tr := c.Transport
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	retries := c.MaxRetries
	if retries <= 0 {
		retries = DefaultMaxRetries
	}
	return &minio.Options{Creds: creds, Secure: u.Scheme == "https", Region: region, BucketLookup: lookup,
		Transport: guard{next: tr}, MaxRetries: retries}, endpoint, nil
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Name is s3://BUCKET/PREFIX.
func (s *Store) Name() string { return s.name }

// Endpoint is the server's URL.
func (s *Store) Endpoint() string { return s.endpoint }

// List lists the prefix's objects, a page of 1,000 keys per request,
// failing with ErrTooMany past Config.MaxObjects, with ErrListTimeout when
// a page or the whole listing outlasts its deadline, and with ErrListLoop
// when the pages do not advance. Folder markers (keys ending in a slash)
// are left out.
func (s *Store) List(ctx context.Context) ([]dataset.Object, error) {
	var out []dataset.Object
	err := s.each(ctx, listPage, func(o minio.ObjectInfo) error {
		if isFolder(o.Key) {
			return nil
		}
		if len(out) == s.maxObjects {
			return fmt.Errorf("%w: %s holds more than %d objects (raise the limit)", ErrTooMany, s.name, s.maxObjects)
		}
		out = append(out, dataset.Object{Key: strings.TrimPrefix(o.Key, s.prefix), Size: o.Size, ETag: strings.Trim(o.ETag, `"`), ModTime: o.LastModified.UnixNano()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadAt reads len(p) bytes of o at off with one ranged GET conditional
// on o's ETag (If-Match): another ETag fails with dataset.ErrChanged. A
// read past o's end is cut short with io.EOF. A body cut short (a reset
// connection) is read again, up to bodyTries times in all; the request
// itself is retried by the client (Config.MaxRetries).
func (s *Store) ReadAt(o dataset.Object, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("s3src: %s: negative offset %d", dataset.DisplayName(o.Key), off)
	}
	if off >= o.Size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), o.Size-off)
	if want == 0 {
		return 0, nil
	}
	var n int
	var err error
	for range bodyTries {
		if n, err = s.readRange(o, p[:want], off); err == nil || !transient(err) {
			break
		}
	}
	if err != nil {
		return n, err
	}
	if want < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

// bodyTries bounds the reads of one range whose body was cut short.
const bodyTries = 3

// errBody marks a response body that ended early or failed mid-way.
var errBody = errors.New("s3src: body cut short")

func transient(err error) bool { return errors.Is(err, errBody) }

// readRange fills p from o at off with one ranged GET, checking that the
// server answered that range (a server that ignores Range sends the
// object from its start).
func (s *Store) readRange(o dataset.Object, p []byte, off int64) (int, error) {
	ctx, cancel := s.reqCtx()
	defer cancel()
	opts := minio.GetObjectOptions{}
	last := off + int64(len(p)) - 1
	if err := opts.SetRange(off, last); err != nil {
		return 0, err
	}
	body, hdr, err := s.get(ctx, o, opts)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	if cr := hdr.Get("Content-Range"); !strings.HasPrefix(cr, fmt.Sprintf("bytes %d-%d/", off, last)) &&
		(off != 0 || int64(len(p)) != o.Size || cr != "") { // a whole object may come without one
		return 0, fmt.Errorf("s3src: read %s: asked for bytes %d-%d, the server sent %q", dataset.DisplayName(o.Key), off, last, cr)
	}
	n, err := io.ReadFull(body, p)
	if err != nil {
		return n, fmt.Errorf("s3src: read %s: %w: %w", dataset.DisplayName(o.Key), errBody, err)
	}
	return n, nil
}

// Open streams o whole with one GET conditional on its ETag; a body cut
// short is resumed from where it stopped with a ranged GET, up to
// bodyTries times in all.
func (s *Store) Open(o dataset.Object) (io.ReadCloser, error) {
	r := &resumer{s: s, o: o}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

// resumer is an object's body that resumes after a cut.
type resumer struct {
	s      *Store
	o      dataset.Object
	off    int64 // bytes read so far
	tries  int
	body   io.ReadCloser
	cancel context.CancelFunc
}

// open sends the GET for the rest of the object, from off.
func (r *resumer) open() error {
	ctx, cancel := r.s.reqCtx()
	opts := minio.GetObjectOptions{}
	if r.off > 0 {
		if err := opts.SetRange(r.off, r.o.Size-1); err != nil {
			cancel()
			return err
		}
	}
	body, hdr, err := r.s.get(ctx, r.o, opts)
	if err != nil {
		cancel()
		return err
	}
	if cr := hdr.Get("Content-Range"); r.off > 0 && !strings.HasPrefix(cr, fmt.Sprintf("bytes %d-", r.off)) {
		body.Close()
		cancel()
		return fmt.Errorf("s3src: read %s: asked for bytes from %d, the server sent %q", dataset.DisplayName(r.o.Key), r.off, cr)
	}
	r.tries++
	r.body, r.cancel = body, cancel
	return nil
}

func (r *resumer) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	r.off += int64(n)
	if err == nil || err == io.EOF || r.off >= r.o.Size || r.tries >= bodyTries {
		return n, err
	}
	r.closeBody()
	if oerr := r.open(); oerr != nil {
		return n, fmt.Errorf("s3src: resume %s at byte %d after %v: %w", dataset.DisplayName(r.o.Key), r.off, err, oerr)
	}
	return n, nil
}

func (r *resumer) closeBody() error {
	err := r.body.Close()
	r.cancel()
	return err
}

func (r *resumer) Close() error { return r.closeBody() }

// reqCtx is one request's context: bounded by the timeout, ended by Close.
func (s *Store) reqCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.timeout)
}

// get sends a GET for o conditional on its ETag and checks the answer's
// ETag too (a server may ignore If-Match).
func (s *Store) get(ctx context.Context, o dataset.Object, opts minio.GetObjectOptions) (io.ReadCloser, http.Header, error) {
	if o.ETag != "" {
		if err := opts.SetMatchETag(o.ETag); err != nil {
			return nil, nil, err
		}
	}
	body, info, hdr, err := s.core.GetObject(ctx, s.bucket, s.prefix+o.Key, opts)
	if err != nil {
		return nil, nil, s.wrapObject(err, o)
	}
	if got := strings.Trim(info.ETag, `"`); o.ETag != "" && got != "" && got != o.ETag {
		body.Close()
		return nil, nil, fmt.Errorf("%w: %s has ETag %s, indexed %s", dataset.ErrChanged, dataset.DisplayName(o.Key), got, o.ETag)
	}
	return body, hdr, nil
}

// wrapObject maps a GET's error: a failed If-Match is ErrChanged, a
// missing key fs.ErrNotExist.
func (s *Store) wrapObject(err error, o dataset.Object) error {
	r := minio.ToErrorResponse(err)
	switch {
	case r.StatusCode == http.StatusPreconditionFailed || r.Code == "PreconditionFailed":
		return fmt.Errorf("%w: %s no longer has ETag %s", dataset.ErrChanged, dataset.DisplayName(o.Key), o.ETag)
	case r.Code == "NoSuchKey" || (r.StatusCode == http.StatusNotFound && r.Code != "NoSuchBucket"):
		return fmt.Errorf("s3src: %s%s: %w", s.name, dataset.DisplayName(o.Key), fs.ErrNotExist)
	}
	return s.wrap(err, "get "+dataset.DisplayName(o.Key))
}

// wrap names the store and the operation, and maps refusals to ErrAccess
// and a missing bucket to ErrNoBucket.
func (s *Store) wrap(err error, op string) error {
	r := minio.ToErrorResponse(err)
	switch r.Code {
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "AllAccessDisabled":
		return fmt.Errorf("%w: %s %s at %s: %s: %s (check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or AWS_PROFILE, and that the policy allows s3:ListBucket and s3:GetObject)",
			ErrAccess, op, s.name, s.endpoint, r.Code, r.Message)
	case "NoSuchBucket":
		return fmt.Errorf("%w: %s at %s", ErrNoBucket, s.name, s.endpoint)
	}
	if r.StatusCode == http.StatusForbidden {
		return fmt.Errorf("%w: %s %s at %s: %v", ErrAccess, op, s.name, s.endpoint, err)
	}
	return fmt.Errorf("s3src: %s %s at %s: %w", op, s.name, s.endpoint, err)
}

// Close ends the requests in flight. It is safe to call twice.
func (s *Store) Close() error {
	s.cancel()
	return nil
}

// OpenDataset opens the dataset at loc: an object store for an s3:// URL
// (a [Store] with c, through dataset.OpenStore), else a directory
// (dataset.OpenContext). It stops when ctx ends: the listing and the reads
// in flight end with it, and it fails naming what it was doing.
func OpenDataset(ctx context.Context, loc string, c Config, opts dataset.OpenOptions) (*dataset.Dataset, error) {
	if !IsURL(loc) {
		return dataset.OpenContext(ctx, loc, opts)
	}
	st, err := New(ctx, loc, c)
	if err != nil {
		return nil, fmt.Errorf("s3src: open dataset: %w", err)
	}
	// NB: Close ends the reads in flight while the samples are hashed;
	// the dataset owns st and closes it again on failure.
	stop := context.AfterFunc(ctx, func() { st.Close() })
	d, err := dataset.OpenStore(ctx, st, opts)
	if !stop() && err == nil { // ctx ended as the open succeeded: st is closed
		d.Close()
		return nil, fmt.Errorf("%w: %s: %w", dataset.ErrInterrupted, st.Name(), context.Cause(ctx))
	}
	return d, err
}
