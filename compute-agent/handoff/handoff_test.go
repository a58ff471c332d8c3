package handoff

import (
	"encoding/binary"
	"testing"

	"github.com/sophon-dl/sophon/internal/testutil"
)

func TestDecodeClientFrame(t *testing.T) {
	tests := []struct {
		name string
		typ  byte
		body string
		ok   bool
	}{
		{"hello", FrameHello, `{"protocol":1,"rank":2,"world":4,"local_rank":0,"local_world":2}`, true},
		{"rank out of world", FrameHello, `{"protocol":1,"rank":4,"world":4,"local_rank":0,"local_world":1}`, false},
		{"local ranks past world", FrameHello, `{"protocol":1,"rank":3,"world":4,"local_rank":0,"local_world":2}`, false},
		{"unknown field", FrameHello, `{"protocol":1,"world":1,"local_world":1,"bogus":1}`, false},
		{"bad dtype", FrameHello, `{"protocol":1,"world":1,"local_world":1,"dtype":"int4"}`, false},
		{"epoch", FrameEpoch, `{"epoch":3,"resume":{"batches":2,"consumed":"AAE="}}`, true},
		{"epoch missing", FrameEpoch, `{"resume":null}`, false},
		{"negative resume", FrameEpoch, `{"epoch":1,"resume":{"batches":-1}}`, false},
		{"trailing data", FrameEpoch, `{"epoch":1} {}`, false},
		{"release", FrameRelease, string(make([]byte, ReleaseLen)), true},
		{"short release", FrameRelease, "abc", false},
		{"agent frame", FrameReady, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeClientFrame(tt.typ, []byte(tt.body))
			if (err == nil) != tt.ok {
				t.Errorf("got %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestFrameTooLong(t *testing.T) {
	a, b := testutil.UnixPair(t)
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], MaxFrame+1)
	go b.Write(hdr[:])
	fr := &FrameReader{r: a}
	if _, _, err := fr.Next(); err == nil || cap(fr.buf) != 0 {
		t.Errorf("got %v with a %d-byte buffer, want a refusal before allocating", err, cap(fr.buf))
	}
}

// FuzzDecodeHandoff feeds arbitrary frames from a trainer to the decoder.
func FuzzDecodeHandoff(f *testing.F) {
	f.Add(byte(FrameHello), []byte(`{"protocol":1,"rank":0,"world":1,"local_rank":0,"local_world":1}`))
	f.Add(byte(FrameEpoch), []byte(`{"epoch":3,"resume":{"batches":2,"consumed":"AAE="}}`))
	f.Add(byte(FrameRelease), make([]byte, ReleaseLen))
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		m, err := DecodeClientFrame(typ, body)
		if err != nil {
			return
		}
		if h := m.Hello; h != nil && h.validate() != nil {
			t.Errorf("accepted an invalid HELLO: %+v", h)
		}
		if e := m.Epoch; e != nil && (e.Epoch == nil || (e.Resume != nil && e.Resume.Batches < 0)) {
			t.Errorf("accepted an invalid EPOCH: %+v", e)
		}
	})
}
