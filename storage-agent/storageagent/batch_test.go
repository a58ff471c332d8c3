package storageagent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestBatchedResponses: a stream that sets accept_batch gets the results
// ready together in one message, within the count and byte bounds, each
// response once and the same as unbatched; a stream that does not set it
// (a client from before) gets one response per message.
func TestBatchedResponses(t *testing.T) {
	a := startAgent(t, testConfig(t))
	const n = 40
	reqs := func(batch bool) []*dataplanepb.FetchRequest {
		var out []*dataplanepb.FetchRequest
		for i := range uint64(n) {
			out = append(out, &dataplanepb.FetchRequest{Tag: i + 1, Sample: i % uint64(a.ds.Len()), AcceptBatch: batch && i == 0})
		}
		return out
	}
	plain := fetchAll(t, a.client, reqs(false)) // fails on a batch: its tag is 0

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := a.client.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs(true) {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the results wait, ready, to be sent together
	got := map[uint64]*dataplanepb.FetchResponse{}
	messages, batches := 0, 0
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		messages++
		rs := msg.GetBatch()
		if len(rs) > 0 {
			batches++
			size := 0
			for _, r := range rs {
				size += len(r.GetData())
			}
			if msg.GetTag() != 0 || msg.GetData() != nil || len(rs) > maxBatch || len(rs) > 1 && size > maxBatchBytes {
				t.Errorf("a batch of %d responses, %d bytes, tag %d: want at most %d and %d bytes, no fields of its own", len(rs), size, msg.GetTag(), maxBatch, maxBatchBytes)
			}
		} else {
			rs = []*dataplanepb.FetchResponse{msg}
		}
		for _, r := range rs {
			if _, dup := got[r.GetTag()]; dup {
				t.Fatalf("tag %d answered twice", r.GetTag())
			}
			got[r.GetTag()] = r
		}
	}
	if len(got) != n {
		t.Fatalf("%d responses, want %d", len(got), n)
	}
	for tag, r := range plain {
		if b := got[tag]; b == nil || b.GetSample() != r.GetSample() || !bytes.Equal(b.GetData(), r.GetData()) {
			t.Errorf("tag %d differs batched", tag)
		}
	}
	if batches == 0 || messages >= n {
		t.Errorf("%d messages, %d of them batches, for %d ready responses: want batches", messages, batches, n)
	}
	t.Logf("%d responses in %d messages (%d batches)", n, messages, batches)
}
