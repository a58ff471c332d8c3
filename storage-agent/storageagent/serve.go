package storageagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sophon-dl/sophon/internal/membership"
	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/budget"
)

// Run listens on Config.Listen and serves until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	lis, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("storageagent: listen: %w", err)
	}
	return a.Serve(ctx, lis)
}

// Serve serves gRPC on lis (closing it when done), the metrics endpoint
// when configured, and the cluster membership unless Config.Gossip.Bind
// is empty, until ctx ends or Close is called. It then stops the gRPC server
// gracefully within Config.ShutdownGrace, force-stops what is left, and
// returns nil; it returns an error when serving fails. An agent serves
// once.
func (a *Agent) Serve(ctx context.Context, lis net.Listener) error {
	ctx, end, err := a.claim(ctx, lis)
	if err != nil {
		return err
	}
	defer end()
	s, err := a.prepare(lis)
	if err != nil {
		return err
	}
	defer s.wg.Wait()
	s.start()
	defer s.stopWork()
	err = s.run(ctx)
	s.shutdown()
	return err
}

// session is one Serve: its servers and the goroutines they run on.
type session struct {
	a        *Agent
	lis      net.Listener // gRPC
	mlis     net.Listener // metrics, nil when none
	gs       *grpc.Server
	hs       *health.Server
	hsrv     *http.Server // metrics, nil when none
	serveErr chan error   // gs.Serve's return
	wg       sync.WaitGroup
	stopWork context.CancelFunc // stops the workers and the watchdog

	node        *membership.Node // nil without membership
	placing     sync.WaitGroup
	stopPlacing context.CancelFunc
}

// claim marks the agent serving on lis, or closes lis and fails when it is
// closed or serving already. It returns ctx made cancellable by Close and
// the function to call when Serve returns.
func (a *Agent) claim(ctx context.Context, lis net.Listener) (context.Context, func(), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.serving {
		lis.Close()
		if a.closed {
			return nil, nil, ErrAgentClosed
		}
		return nil, nil, ErrServing
	}
	ctx, cancel := context.WithCancel(ctx)
	a.serving, a.stop, a.done, a.addr = true, cancel, make(chan struct{}), lis.Addr()
	done := a.done
	return ctx, func() {
		a.mu.Lock()
		a.addr, a.metricsAddr = nil, nil
		a.mu.Unlock()
		close(done)
		cancel()
	}, nil
}

// prepare opens the metrics listener, when configured, and builds the gRPC
// and health servers; it closes lis when it fails.
func (a *Agent) prepare(lis net.Listener) (*session, error) {
	s := &session{a: a, lis: lis, serveErr: make(chan error, 1)}
	if a.cfg.MetricsAddr != "" {
		mlis, err := net.Listen("tcp", a.cfg.MetricsAddr)
		if err != nil {
			lis.Close()
			return nil, fmt.Errorf("storageagent: metrics listen: %w", err)
		}
		s.mlis = mlis
		a.mu.Lock()
		a.metricsAddr = mlis.Addr()
		a.mu.Unlock()
	}
	s.gs = grpc.NewServer(a.gopts...)
	s.hs = health.NewServer()
	dataplanepb.RegisterStorageServer(s.gs, a.srv)
	healthpb.RegisterHealthServer(s.gs, s.hs)
	s.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.hs.SetServingStatus(dataplanepb.Storage_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.lis = &connListener{Listener: lis, size: a.cfg.SendBuffer, force: true, congestion: a.cfg.TCPCongestion, conns: &a.srv.conns, cc: &a.srv.congestion, log: a.cfg.Logger}
	return s, nil
}

// start starts the workers, the watchdog, the gRPC server and the metrics
// server.
func (s *session) start() {
	a := s.a
	// Workers stop only after every handler has returned (WaitForHandlers),
	// since a handler waits for its stream's queued jobs to be dropped.
	workCtx, stopWork := context.WithCancel(context.Background())
	s.stopWork = stopWork
	for i := range a.workers {
		s.wg.Go(func() { a.srv.worker(workCtx, i) })
	}
	for i := range budget.RawWorkers {
		s.wg.Go(func() { a.srv.rawWorker(i) })
	}
	s.wg.Go(func() { a.srv.watch(workCtx, s.hs, a.cfg.StallTimeout) })
	if a.cfg.IdleRelease > 0 {
		s.wg.Go(func() {
			tick := time.NewTicker(a.cfg.IdleRelease)
			defer tick.Stop()
			a.srv.idle.ReleaseWhenIdle(workCtx, tick.C, releaseMemory)
		})
	}
	s.wg.Go(func() { s.serveErr <- s.gs.Serve(s.lis) })
	if s.mlis != nil {
		s.hsrv = &http.Server{Handler: a.srv.m.handler(), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: peerlog.StdLogger(a.peer, a.cfg.Logger, peerlog.MetricsHTTPError)}
		s.wg.Go(func() {
			if err := s.hsrv.Serve(s.mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.cfg.Logger.Error().Err(err).Msg("metrics server failed")
			}
		})
	}
}

// run joins the cluster, when configured, and serves until ctx ends (nil)
// or the gRPC server fails.
func (s *session) run(ctx context.Context) error {
	a := s.a
	if a.cfg.Insecure {
		a.cfg.Logger.Warn().Bool("tls", a.cfg.TLS.Enabled()).Msg("INSECURE (--insecure): " +
			"without TLS anyone who reaches the port can read the dataset, and without a gossip key anyone can join the cluster")
	}
	placeCtx, stopPlacing := context.WithCancel(ctx)
	s.stopPlacing = stopPlacing
	if a.cfg.Gossip.Bind != "" {
		node, p, err := a.join(s.lis.Addr())
		if err != nil {
			return err
		}
		a.mu.Lock()
		a.node = node
		a.mu.Unlock()
		s.node = node
		s.placing.Go(func() { p.run(placeCtx) })
	}
	a.cfg.Logger.Info().Str("addr", s.lis.Addr().String()).Str("node", a.cfg.Name).
		Str("fingerprint", a.ds.Fingerprint()).Uint64("samples", a.ds.Len()).
		Float64("cpus", a.cfg.CPUs).Int("workers", a.workers).Msg("storage agent serving")
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.serveErr:
		return fmt.Errorf("storageagent: grpc serve: %w", err)
	}
}

// shutdown leaves the cluster first, so peers stop picking this agent, then
// drains: the gRPC server within ShutdownGrace, the workers, the metrics
// server. The placer stops before the node: it announces through it.
func (s *session) shutdown() {
	a := s.a
	if s.stopPlacing != nil {
		s.stopPlacing()
	}
	s.placing.Wait()
	if s.node != nil {
		a.mu.Lock()
		a.node = nil
		a.mu.Unlock()
		if err := s.node.Close(); err != nil {
			a.cfg.Logger.Warn().Err(err).Msg("leaving the cluster")
		}
	}
	s.hs.Shutdown()
	a.stopGRPC(s.gs)
	s.stopWork()
	a.srv.stopWorkers()
	if s.hsrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), metricsStopWithin)
		if s.hsrv.Shutdown(ctx) != nil {
			s.hsrv.Close()
		}
		cancel()
	}
	a.cfg.Logger.Info().Msg("storage agent stopped")
}

// stopGRPC stops gs gracefully, force-stopping it after ShutdownGrace.
func (a *Agent) stopGRPC(gs *grpc.Server) {
	stopped := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		gs.GracefulStop()
		close(stopped)
	})
	t := time.NewTimer(a.cfg.ShutdownGrace)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		a.cfg.Logger.Warn().Dur("grace", a.cfg.ShutdownGrace).Msg("streams still open: force-stopping")
		gs.Stop()
	}
	wg.Wait()
}
