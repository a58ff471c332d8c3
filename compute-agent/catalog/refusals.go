package catalog

import (
	"context"
	"fmt"
	"sync"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Refusals are the storage agents refused for the rest of a run, by name,
// with why. The zero value refuses none; a nil *Refusals refuses none and
// records nothing.
type Refusals struct {
	// Log receives one error line per agent refused.
	Log zerolog.Logger
	m   sync.Map
}

// Refuse marks storage agent name as not to be used again.
func (rs *Refusals) Refuse(name string, why error) {
	if rs == nil {
		return
	}
	if _, loaded := rs.m.LoadOrStore(name, why); !loaded {
		rs.Log.Error().Err(why).Str("storage", name).Msg("storage agent refused for the rest of the run")
	}
}

// Refusal is why storage agent name was refused, or nil.
func (rs *Refusals) Refusal(name string) error {
	if rs == nil {
		return nil
	}
	if v, ok := rs.m.Load(name); ok {
		return fmt.Errorf("%s refused: %w", name, v.(error))
	}
	return nil
}

// Guard wraps a storage agent's client so that, once the agent is refused,
// new Fetch streams fail and open ones fail at their next response: the
// fetcher's own retry logic then moves the work to other replicas.
func (rs *Refusals) Guard(name string, c dataplanepb.StorageClient) dataplanepb.StorageClient {
	return &guardedClient{StorageClient: c, rs: rs, name: name}
}

type guardedClient struct {
	dataplanepb.StorageClient
	rs   *Refusals
	name string
}

func (g *guardedClient) Fetch(ctx context.Context, opts ...grpc.CallOption) (dataplanepb.Storage_FetchClient, error) {
	if err := g.rs.Refusal(g.name); err != nil {
		return nil, err
	}
	s, err := g.StorageClient.Fetch(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return &guardedStream{Storage_FetchClient: s, g: g}, nil
}

type guardedStream struct {
	dataplanepb.Storage_FetchClient
	g *guardedClient
}

func (s *guardedStream) Recv() (*dataplanepb.FetchResponse, error) {
	if err := s.g.rs.Refusal(s.g.name); err != nil {
		return nil, err
	}
	return s.Storage_FetchClient.Recv()
}
