package fileserve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeTree writes n fake JPEGs of different sizes in two class folders,
// plus files the index must skip, and returns the JPEGs' relative paths in
// sorted order.
func writeTree(t *testing.T, dir string, n int) []string {
	t.Helper()
	var rels []string
	for i := range n {
		rel := fmt.Sprintf("class_%03d/n%08d.jpg", i%2, i)
		if i == n-1 {
			rel = fmt.Sprintf("class_%03d/n%08d.JPEG", i%2, i)
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		body := bytes.Repeat([]byte{0xff, 0xd8, byte(i)}, 100+37*i)
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
		rels = append(rels, rel)
	}
	if err := os.WriteFile(filepath.Join(dir, "README.txt"), []byte("not a jpeg"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A secret beside the served folder, which no request may reach.
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "secret.jpg"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Sort as ListJPEGs does: by full path.
	slices.Sort(rels)
	return rels
}

// start serves s on a loopback port until the test ends.
func start(t *testing.T, s *Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + lis.Addr().String()
}

func get(t *testing.T, url string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func TestServe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	rels := writeTree(t, dir, 7)
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, s)

	code, _, body := get(t, base+"/index.json")
	if code != http.StatusOK {
		t.Fatalf("index: status %d: %s", code, body)
	}
	var idx Index
	if err := json.Unmarshal(body, &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Files) != len(rels) {
		t.Fatalf("index has %d files, want %d: %+v", len(idx.Files), len(rels), idx.Files)
	}
	var total int64
	for i, f := range idx.Files {
		if f.ID != i || f.Path != rels[i] {
			t.Errorf("index[%d] = %+v, want id %d path %s", i, f, i, rels[i])
		}
		total += f.Size
	}
	if got := s.TotalBytes(); got != total {
		t.Errorf("TotalBytes() = %d, want %d", got, total)
	}

	for pass := range 2 {
		for _, f := range idx.Files {
			code, h, got := get(t, fmt.Sprintf("%s/files/%d", base, f.ID))
			if code != http.StatusOK {
				t.Fatalf("file %d: status %d: %s", f.ID, code, got)
			}
			want, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("pass %d: file %d: got %d bytes differing from the disk's %d", pass, f.ID, len(got), len(want))
			}
			if cl := h.Get("Content-Length"); cl != fmt.Sprint(len(want)) || int64(len(want)) != f.Size {
				t.Errorf("file %d: Content-Length %s, index size %d, want %d", f.ID, cl, f.Size, len(want))
			}
		}
	}
	if got, want := s.Requests(), int64(2*len(rels)); got != want {
		t.Errorf("Requests() = %d, want %d", got, want)
	}
	if got, want := s.BytesServed(), 2*total; got != want {
		t.Errorf("BytesServed() = %d, want %d", got, want)
	}

	// HEAD tells the size without counting bytes.
	resp, err := http.Head(base + "/files/0")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength != idx.Files[0].Size {
		t.Errorf("HEAD: status %d, length %d, want 200, %d", resp.StatusCode, resp.ContentLength, idx.Files[0].Size)
	}

	if code, _, body := get(t, base+"/healthz"); code != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Errorf("healthz: %d %q", code, body)
	}
	if got, want := s.BytesServed(), 2*total; got != want {
		t.Errorf("after HEAD and healthz: BytesServed() = %d, want %d", got, want)
	}
}

func TestNotFound(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	writeTree(t, dir, 3)
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	base := start(t, s)
	for _, tc := range []struct {
		path string
		// typed: the answer is the JSON ErrUnknownID body, not the mux's.
		typed bool
	}{
		{"/files/3", true}, {"/files/-1", true}, {"/files/+1", true}, {"/files/01", true},
		{"/files/1e0", true}, {"/files/x", true}, {"/files/99999999999999999999999", true},
		{"/files/..%2Fsecret.jpg", true}, {"/files/%2e%2e%2fsecret.jpg", true},
		{"/files/", false}, {"/files/0/extra", false}, {"/files/../secret.jpg", false},
		{"/secret.jpg", false}, {"/class_000/n00000000.jpg", false}, {"/data/class_000/n00000000.jpg", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, h, body := get(t, base+tc.path)
			if code != http.StatusNotFound {
				t.Fatalf("status %d (%q), want 404", code, body)
			}
			if !tc.typed {
				return
			}
			var e struct{ Error string }
			if err := json.Unmarshal(body, &e); err != nil || !strings.HasPrefix(e.Error, ErrUnknownID.Error()) {
				t.Errorf("body %q (content type %s), want a JSON %q error", body, h.Get("Content-Type"), ErrUnknownID)
			}
		})
	}
	if s.Requests() != 0 || s.BytesServed() != 0 {
		t.Errorf("counters %d requests, %d bytes after only failures, want 0", s.Requests(), s.BytesServed())
	}
}

func TestNewEmpty(t *testing.T) {
	if _, err := New(t.TempDir()); !errors.Is(err, ErrNoFiles) {
		t.Errorf("New(empty) = %v, want %v", err, ErrNoFiles)
	}
	if _, err := New(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("New(missing folder) succeeded")
	}
}

// TestServeShutdown checks that Serve returns once ctx ends, even with an
// idle keep-alive connection open, and that it stops listening.
func TestServeShutdown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	writeTree(t, dir, 2)
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + lis.Addr().String() + "/files/1")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close() // the connection stays open, idle

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(ShutdownTimeout):
		t.Fatal("Serve did not return after ctx ended")
	}
	if _, err := net.DialTimeout("tcp", lis.Addr().String(), time.Second); err == nil {
		t.Error("still accepting after Serve returned")
	}
}

// FuzzParseID checks that only canonical in-range decimals name a file.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"0", "6", "7", "-1", "+1", "01", "", "..%2F", "1e0", " 1"} {
		f.Add(s)
	}
	s := &Server{files: make([]File, 7)}
	f.Fuzz(func(t *testing.T, v string) {
		id, ok := s.parseID(v)
		if !ok {
			return
		}
		if id < 0 || id >= len(s.files) || fmt.Sprint(id) != v {
			t.Errorf("parseID(%q) = %d, true", v, id)
		}
	})
}
