package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/testbed/fileserve"
)

const serveUsage = `testbed serve: serve a folder's JPEGs over plain HTTP, by id, for the peer
row (a stock PyTorch DataLoader reading raw files; see testbed/peer).

Routes: GET /index.json (ids, paths, sizes), GET /files/<id>, GET /healthz.

Examples:
  testbed serve --data /tmp/imagenet-like
  testbed serve --data /tmp/imagenet-like --listen 10.77.0.1:8080
  /usr/bin/python3 testbed/peer/dataloader_peer.py --url http://127.0.0.1:8080 --epochs 2

Flags:
`

func runServe(ctx context.Context, args []string, log zerolog.Logger) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	data := fs.String("data", "", "folder of JPEGs (searched recursively; ids follow the sorted paths)")
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on (port 0 picks a free one)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *data == "" {
		fs.Usage()
		return fmt.Errorf("serve: --data is required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	srv, err := fileserve.New(*data)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Printf("serving %d files on %s\n", len(srv.Files()), lis.Addr())
	start := time.Now()
	err = srv.Serve(ctx, lis)
	log.Info().Int64("requests", srv.Requests()).Int64("bytes", srv.BytesServed()).
		Str("took", time.Since(start).Round(time.Millisecond).String()).Msg("file server stopped")
	return err
}
