package results

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// accountCell is a 100 Mbit/s cell with half a storage core and 2
// compute cores, bound 2 s, and one run whose steady epoch has a plan
// that assumed 12.5 MB/s, 0.5 storage cores and 2 compute cores.
func accountCell(seconds float64, e Epoch) *Cell {
	e.Seconds = seconds
	e.Prediction = &Prediction{
		Seconds: 3, Bottleneck: "storage-cpu",
		Bytes: 25e6, LinkSeconds: 2, StorageCPUSeconds: 1.5, StorageSeconds: 3, ComputeCPUSeconds: 4, ComputeSeconds: 2,
		LinkBytesPerSec: 12.5e6, StorageCores: 0.5, ComputeCores: 2, StorageSpeed: 0.9,
	}
	return &Cell{
		Rate: "100mbit", RateBitsPerSec: 100e6, StorageCPUs: 0.5,
		Bound: &CellBound{Seconds: 2, LinkBytesPerSec: 12.5e6, StorageCores: 0.5, ComputeCores: 2, StorageSpeed: 1, Profile: "/x/profile-100mbit-cpu0.5.zst", Samples: 160},
		Runs:  []Run{{Policy: "optimal", ExactlyOnce: true, ContentMatches: true, Epochs: []Epoch{e}}},
	}
}

func close9(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestAccountOf: the measured side of the account is the kernel's payload
// (the agent's bytes without it) over the link's payload rate (the shaped
// rate times Cell.LinkPayloadFraction; unset: the shaped rate), the ops' CPU plus
// the measured transport over the cell's storage cores, and the compute
// agent's process CPU (its finishing CPU without one) over the cell's
// compute cores; the predicted side is the plan's.
func TestAccountOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		e        Epoch
		bytes    float64
		storCPU  float64
		storTime float64
		frac     float64
		payload  float64
		compCPU  float64 // the measured compute CPU
		compute  float64 // and time
	}{
		{"kernel payload", Epoch{AgentBytes: 24e6, KernelPayloadBytes: 25e6, StorageCPUSeconds: 0.8, ComputeCPUSeconds: 3}, 25e6, 0.8, 1.6, 0, 12.5e6, 3, 1.5},
		{"agent bytes, transport", Epoch{AgentBytes: 20e6, StorageCPUSeconds: 0.8, StorageNSPerByte: 10, ComputeCPUSeconds: 3}, 20e6, 1.0, 2.0, 1, 12.5e6, 3, 1.5},
		{"headers", Epoch{AgentBytes: 24e6, KernelPayloadBytes: 25e6, StorageCPUSeconds: 0.8, ComputeCPUSeconds: 3}, 25e6, 0.8, 1.6, 0.8, 10e6, 3, 1.5},
		{"process CPU", Epoch{AgentBytes: 25e6, StorageCPUSeconds: 0.8, ComputeCPUSeconds: 3, ComputeProcessCPUSeconds: 4.6}, 25e6, 0.8, 1.6, 1, 12.5e6, 4.6, 2.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := accountCell(2.5, tc.e)
			c.LinkPayloadFraction = tc.frac
			a, ok := AccountOf(c, c.Runs[0].Steady())
			if !ok {
				t.Fatal("no account for an epoch with a prediction")
			}
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"pred bytes", a.PredBytes, 25e6}, {"pred link", a.PredLink, 2},
				{"pred storage CPU", a.PredStorageCPU, 1.5}, {"pred storage", a.PredStorage, 3},
				{"pred compute CPU", a.PredComputeCPU, 4}, {"pred compute", a.PredCompute, 2},
				{"meas bytes", a.MeasBytes, tc.bytes}, {"meas link", a.MeasLink, tc.bytes / tc.payload},
				{"meas storage CPU", a.MeasStorageCPU, tc.storCPU}, {"meas storage", a.MeasStorage, tc.storTime},
				{"meas compute CPU", a.MeasComputeCPU, tc.compCPU}, {"meas compute", a.MeasCompute, tc.compute},
			} {
				if !close9(f.got, f.want) {
					t.Errorf("%s: got %v, want %v", f.name, f.got, f.want)
				}
			}
		})
	}
	c := accountCell(2.5, Epoch{})
	c.Runs[0].Epochs[0].Prediction = nil
	if _, ok := AccountOf(c, c.Runs[0].Steady()); ok {
		t.Error("an account for an epoch without a prediction")
	}
}

// TestAccountRawOffloads: the account's "offloads sent raw" column is the
// prediction's shed cut against the epoch's shed plus contended offloads,
// with the two parts named when both happened.
func TestAccountRawOffloads(t *testing.T) {
	col := slices.IndexFunc(accountColumns, func(c column) bool { return c.MD == "offloads sent raw pred / meas" })
	if col < 0 {
		t.Fatal("no offloads-sent-raw column in the account")
	}
	for _, tc := range []struct {
		pred, shed, contended int
		want                  string
	}{
		{0, 0, 0, "0 / 0"},
		{82, 82, 0, "82 / 82"},
		{0, 0, 27, "0 / 27"},
		{3, 15, 3, "3 / 18 (15 + 3)"},
	} {
		c := accountCell(2.5, Epoch{AgentBytes: 24e6, Shed: tc.shed, Contended: tc.contended})
		c.Runs[0].Epochs[0].Prediction.Shed = tc.pred
		if got := accountTable(c)[0][col]; got != tc.want {
			t.Errorf("predicted %d, shed %d, contended %d: %q, want %q", tc.pred, tc.shed, tc.contended, got, tc.want)
		}
	}
}

// TestBelowBound: an epoch more than BoundNoise below the cell's bound is
// flagged, in the account table and the main table, with the resource
// whose measured time fell furthest below the plan's; one within the
// noise, or above, is not.
func TestBelowBound(t *testing.T) {
	// Storage: 0.8 CPU-s over 0.5 cores = 1.6 s against 3 s predicted
	// (0.53x); link 24 MB = 1.92 s against 2 (within noise); compute 3
	// CPU-s over 2 cores = 1.5 s against 2 (0.75x).
	e := Epoch{AgentBytes: 24e6, StorageCPUSeconds: 0.8, ComputeCPUSeconds: 3}
	for _, tc := range []struct {
		secs  float64
		below bool
	}{
		{1.80, true},  // 10% below
		{1.95, false}, // 2.5% below: noise
		{2.50, false},
	} {
		c := accountCell(tc.secs, e)
		by, below := c.BelowBound(c.Runs[0].Steady())
		if below != tc.below || !close9(by, (2-tc.secs)/2) {
			t.Errorf("%.2f s against a 2 s bound: below %t by %.3f, want %t by %.3f", tc.secs, below, by, tc.below, (2-tc.secs)/2)
		}
		acct := accountTable(c)
		if len(acct) != 1 {
			t.Fatalf("%d account rows, want 1", len(acct))
		}
		note, main := acct[0][len(accountColumns)-1], cellTable(c)[0][len(columns)-1]
		flagged := strings.Contains(note, "BELOW BOUND") && strings.Contains(main, "BELOW BOUND")
		if flagged != tc.below {
			t.Errorf("%.2f s: account %q, table %q; flagged %t, want %t", tc.secs, note, main, flagged, tc.below)
		}
		if tc.below && (!strings.Contains(note, "storage CPU measured 0.53x") || !strings.Contains(main, "storage CPU below the model's")) {
			t.Errorf("%.2f s: account %q, table %q: want storage CPU named", tc.secs, note, main)
		}
		if got := cellTable(c)[0][3]; got != "2.00" {
			t.Errorf("bound column %q, want the cell's 2.00", got)
		}
	}
	if r, ratio := (Account{PredLink: 2, MeasLink: 1.98, PredStorage: 1, MeasStorage: 0.99}).Under(); r != "" {
		t.Errorf("within the noise: %s at %.2f named", r, ratio)
	}
}

// TestCellBoundOnePerCell: every row shows the cell's bound, whatever
// the agents' own bounds were, and a file from before the cell bound
// reads its epochs' bound_seconds as the agents' view.
func TestCellBoundOnePerCell(t *testing.T) {
	r := synthetic(testGrid[:1])
	c := &r.Cells[0]
	for i := range c.Runs {
		for j := range c.Runs[i].Epochs {
			c.Runs[i].Epochs[j].AgentBoundSeconds = 1 + float64(i)/10
		}
	}
	c.Bound = &CellBound{Seconds: 3.25}
	bounds := map[string]bool{}
	for _, row := range cellTable(c) {
		if row[3] != none {
			bounds[row[3]] = true
		}
	}
	if len(bounds) != 1 || !bounds["3.25"] {
		t.Errorf("bounds in the table %v, want only the cell's 3.25", bounds)
	}
	var old Epoch
	if err := json.Unmarshal([]byte(`{"epoch":2,"seconds":3,"bound_seconds":1.5}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.AgentBoundSeconds != 1.5 || old.Seconds != 3 || old.Epoch != 2 {
		t.Errorf("old epoch read as %+v", old)
	}
	dir := t.TempDir()
	path, err := Write(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"bound_seconds"`) || !strings.Contains(string(b), `"agent_bound_seconds"`) {
		t.Error("results.json names the agents' bound bound_seconds")
	}
	back, err := Load(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Cells[0].BoundSeconds(); got != 3.25 {
		t.Errorf("bound read back %v, want 3.25", got)
	}
}
