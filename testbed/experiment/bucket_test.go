package experiment

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/s3gw/s3gwtest"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// TestExperimentBucketLoopback runs a cell whose storage agent reads the
// dataset from an S3 bucket (versitygw over the dataset folder's parent):
// every sample exactly once, with its content checked, and the report
// naming the bucket. (That the tensors are the folder's is
// storageagent's TestServeFromBucket, and the --reference row of
// docs/results.md.)
func TestExperimentBucketLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries and an S3 server")
	}
	s3gwtest.Require(t)
	bins := buildBinaries(t)
	data := smallDataset(t, 16)
	fromBucket := Config{
		Data: data, S3Root: filepath.Dir(data), Out: t.TempDir(), Rates: []shape.Rate{shape.MustParseRate("100mbit")}, StorageCPUs: []float64{1},
		Policies: []string{"nooff"}, Epochs: 1, Bin: bins, Mode: ModeLoopback, Log: zerolog.Nop(),
	}
	res, err := Run(context.Background(), fromBucket)
	if err != nil {
		t.Fatal(err)
	}
	if res.Dataset.Source != "s3://data" || res.Mode != results.ModeLoopback {
		t.Errorf("source %q, mode %q; want s3://data, loopback", res.Dataset.Source, res.Mode)
	}
	for _, r := range res.Cells[0].Runs {
		if r.Error != "" || !r.ExactlyOnce || !r.ContentMatches {
			t.Errorf("%s: error %q, exactly once %v, content %v", r.Policy, r.Error, r.ExactlyOnce, r.ContentMatches)
		}
	}
	report, err := os.ReadFile(filepath.Join(fromBucket.Out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "from the bucket `s3://data`") {
		t.Error("the report does not name the bucket")
	}
	checkNothingLeft(t, bins)
}
