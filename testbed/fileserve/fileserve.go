// Package fileserve serves a folder of JPEGs over plain HTTP, by number
// only: the storage node of the testbed's peer row, where a stock PyTorch
// DataLoader reads the raw files through the same shaped link that the
// agents use.
//
// The routes:
//
//	GET /index.json  {"files":[{"id":0,"path":"class_000/n00000000.jpg","size":N},...]}
//	GET /files/{id}  the file's bytes, Content-Length set; 404 for an unknown id
//	GET /healthz     "ok"
//
// Ids are the files' positions in [testbed.ListJPEGs]' sorted order, so the
// same folder always gives the same ids. Only indexed files can be read: a
// request names an id, never a path, so no request can reach outside the
// folder.
package fileserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sophon-dl/sophon/testbed"
)

// ShutdownTimeout bounds how long [Server.Serve] waits for requests in
// flight after its ctx ends before it closes their connections.
const ShutdownTimeout = 5 * time.Second

// Errors, sent as {"error": "..."} bodies with the status noted.
var (
	// ErrNoFiles is returned by [New] for a folder without JPEGs.
	ErrNoFiles = errors.New("fileserve: no JPEGs")
	// ErrUnknownID answers a /files/{id} whose id is not a decimal index
	// into the index (404).
	ErrUnknownID = errors.New("fileserve: unknown file id")
)

// File is one entry of /index.json.
type File struct {
	ID int `json:"id"`
	// Path is relative to the served folder, with forward slashes.
	Path string `json:"path"`
	// Size is the file's size in bytes when the index was built.
	Size int64 `json:"size"`
}

// Index is the body of /index.json.
type Index struct {
	Files []File `json:"files"`
}

// Server serves one folder's JPEGs. Its methods are safe for concurrent
// use.
type Server struct {
	root  string
	files []File
	abs   []string // per id, the path opened
	index []byte   // /index.json, encoded once

	bytes    atomic.Int64
	requests atomic.Int64
}

// New indexes the JPEGs under root (recursively, *.jpg and *.jpeg; see
// [testbed.ListJPEGs]). The index is fixed: files added later are not
// served.
func New(root string) (*Server, error) {
	paths, err := testbed.ListJPEGs(root)
	if err != nil {
		return nil, fmt.Errorf("fileserve: %w", err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w under %s", ErrNoFiles, root)
	}
	s := &Server{root: root, files: make([]File, len(paths)), abs: paths}
	for i, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("fileserve: %w", err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil, fmt.Errorf("fileserve: %w", err)
		}
		s.files[i] = File{ID: i, Path: filepath.ToSlash(rel), Size: st.Size()}
	}
	if s.index, err = json.Marshal(Index{Files: s.files}); err != nil {
		return nil, fmt.Errorf("fileserve: %w", err)
	}
	return s, nil
}

// Files returns a copy of the index.
func (s *Server) Files() []File { return append([]File(nil), s.files...) }

// TotalBytes is the sum of the indexed files' sizes: what one pass over
// every id serves.
func (s *Server) TotalBytes() int64 {
	var n int64
	for _, f := range s.files {
		n += f.Size
	}
	return n
}

// BytesServed counts the file bytes sent by GET /files/{id} responses
// (not the index, not HEAD requests). A response is counted as it starts
// and corrected if it is cut short, so a client that has read a whole file
// finds it counted.
func (s *Server) BytesServed() int64 { return s.bytes.Load() }

// Requests counts the GET /files/{id} requests answered with the whole
// file, counted as BytesServed is.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Handler returns the routes in the package comment.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /index.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(s.index)))
		w.Write(s.index)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /files/{id}", s.serveFile)
	return mux
}

func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	id, ok := s.parseID(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("%w %q (the index has 0..%d)", ErrUnknownID, r.PathValue("id"), len(s.files)-1))
		return
	}
	f, err := os.Open(s.abs[id])
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("fileserve: file %d: %w", id, err))
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("fileserve: file %d: %w", id, err))
		return
	}
	w.Header().Set("Content-Type", "image/jpeg")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	if r.Method == http.MethodHead {
		return
	}
	// NB: count before sending. io.Copy may sendfile straight to the
	// socket, so a client can hold the whole file before io.Copy returns;
	// counting first means a client that has read a file sees it counted.
	// A transfer cut short takes back what it did not send.
	s.requests.Add(1)
	s.bytes.Add(st.Size())
	n, err := io.Copy(w, f)
	if err != nil || n != st.Size() {
		s.requests.Add(-1)
		s.bytes.Add(n - st.Size())
	}
}

// parseID accepts only the canonical decimal form of an indexed id, so
// each file has exactly one URL.
func (s *Server) parseID(v string) (int, bool) {
	id, err := strconv.Atoi(v)
	if err != nil || id < 0 || id >= len(s.files) || strconv.Itoa(id) != v {
		return 0, false
	}
	return id, true
}

func writeError(w http.ResponseWriter, code int, err error) {
	b, _ := json.Marshal(map[string]string{"error": err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// Serve answers HTTP on lis until ctx ends, then shuts down gracefully:
// it stops accepting, closes idle keep-alive connections and waits up to
// [ShutdownTimeout] for requests in flight before closing the rest. It
// closes lis. It returns nil after a shutdown caused by ctx, or the error
// that stopped serving first.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("fileserve: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		hs.Close()
		err = fmt.Errorf("fileserve: shutdown: %w", err)
	}
	// Wait for hs.Serve, which returns ErrServerClosed once shutdown began.
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("fileserve: serve: %w", serr)
	}
	return err
}
