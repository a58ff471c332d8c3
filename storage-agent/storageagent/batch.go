package storageagent

import (
	"context"

	"google.golang.org/grpc"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Batched responses: to a client that set FetchRequest.accept_batch the
// sender sends the results that are ready together in one message
// (FetchResponse.batch), at most maxBatch of them and maxBatchBytes of
// data (a result larger than that alone goes alone), so that small
// responses (a compressed crop of 10-16 KB) do not pay a gRPC message,
// an HTTP/2 frame and a TLS record each. It waits for nothing: a batch is
// what the workers finished while the last message was being sent, so
// an idle link sends each result as it comes.
const (
	maxBatch      = 16
	maxBatchBytes = 256 << 10
)

// sendQueue is a stream's two result buffers as the sender drains them:
// budgeted results first; a nil channel is closed and drained.
type sendQueue struct {
	first, second <-chan result
	held          *result // taken, but left out of the last batch
}

// next is the next result: with wait, the first to come (false once both
// buffers are closed and drained, or ctx ended); without, one ready now
// (false when none is).
func (q *sendQueue) next(ctx context.Context, wait bool) (result, bool) {
	if r := q.held; r != nil {
		q.held = nil
		return *r, true
	}
	for q.first != nil || q.second != nil {
		select {
		case r, ok := <-q.first:
			if !ok {
				q.first = nil
				continue
			}
			return r, true
		default:
		}
		if !wait {
			select {
			case r, ok := <-q.second:
				if !ok {
					q.second = nil
					continue
				}
				return r, true
			default:
				return result{}, false
			}
		}
		select {
		case r, ok := <-q.first:
			if !ok {
				q.first = nil
				continue
			}
			return r, true
		case r, ok := <-q.second:
			if !ok {
				q.second = nil
				continue
			}
			return r, true
		case <-ctx.Done():
			return result{}, false
		}
	}
	return result{}, false
}

// send sends st's results until both buffers are closed or ctx ends,
// budgeted results first, batched when the client takes batches, and
// gives back a slot per response sent.
func (s *server) send(ctx context.Context, stream grpc.BidiStreamingServer[dataplanepb.FetchRequest, dataplanepb.FetchResponse], st *fetchStream) error {
	q := &sendQueue{first: st.results, second: st.raw}
	for {
		r, ok := q.next(ctx, true)
		if !ok {
			return nil
		}
		batch := []result{r}
		if st.batched.Load() {
			bytes := len(r.resp.Data)
			for len(batch) < maxBatch {
				more, ok := q.next(ctx, false)
				if !ok {
					break
				}
				if bytes+len(more.resp.Data) > maxBatchBytes {
					q.held = &more
					break
				}
				batch, bytes = append(batch, more), bytes+len(more.resp.Data)
			}
		}
		if err := s.sendBatch(stream, st, batch); err != nil {
			return err
		}
	}
}

// sendBatch sends batch, one message of them (one response alone), and
// accounts each response sent.
func (s *server) sendBatch(stream grpc.BidiStreamingServer[dataplanepb.FetchRequest, dataplanepb.FetchResponse], st *fetchStream, batch []result) error {
	msg := batch[0].resp
	if len(batch) > 1 {
		msg = &dataplanepb.FetchResponse{Batch: make([]*dataplanepb.FetchResponse, len(batch))}
		for i, r := range batch {
			msg.Batch[i] = r.resp
		}
		s.m.batches.Inc()
	}
	err := stream.Send(msg)
	for _, r := range batch {
		s.unbuffer(st, int64(len(r.resp.Data)))
		<-st.slots
		if err == nil && r.resp.Error == nil {
			s.m.sent(r.split, len(r.resp.Data))
		}
	}
	return err
}
