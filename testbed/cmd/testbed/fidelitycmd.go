package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/testbed"
)

// maxPSNR is the PSNR given to a crop the round trip left identical, so
// that a mean stays finite.
const maxPSNR = 100

// errNoRoundTrip: the pipeline has no encode_jpeg followed by a decode.
var errNoRoundTrip = errors.New("fidelity: pipeline has no encode_jpeg followed by decode")

// fidelityRow is what testbed fidelity measures for one data set and one
// pipeline: the crop after its JPEG round trip against the same crop
// without it, over every sample and epoch.
type fidelityRow struct {
	Set      string `json:"set"`
	Pipeline string `json:"pipeline"`
	// Samples is the number of crops compared (samples x epochs); Failed
	// the samples the pipeline refused (not compared).
	Samples int `json:"samples"`
	Failed  int `json:"failed"`
	// MeanPSNR, P5PSNR and MinPSNR are over the crops' PSNRs in dB (peak
	// 255, every channel), an identical crop counting maxPSNR.
	MeanPSNR float64 `json:"mean_psnr_db"`
	P5PSNR   float64 `json:"p5_psnr_db"`
	MinPSNR  float64 `json:"min_psnr_db"`
	// MaxAbsErr is the largest difference of one channel value, over all
	// crops.
	MaxAbsErr int `json:"max_abs_err"`
	// MeanJPEGBytes is the mean size of encode_jpeg's output (what a split
	// after it sends); MeanCropBytes the crop's as uint8 before it.
	MeanJPEGBytes float64 `json:"mean_jpeg_bytes"`
	MeanCropBytes float64 `json:"mean_crop_bytes"`
}

// fidelityCrop is one crop's comparison: its sample (an index into the
// set's files), epoch, PSNR and the JPEG's size.
type fidelityCrop struct {
	Sample    int
	Epoch     uint64
	PSNR      float64
	JPEGBytes int
}

func runFidelity(_ context.Context, args []string, log zerolog.Logger) error {
	fs := flag.NewFlagSet("fidelity", flag.ContinueOnError)
	data := fs.String("data", "", "comma-separated folders of JPEGs (searched recursively), one row set each")
	pipelines := fs.String("pipelines", "imagenet-train-q95,imagenet-train-q90",
		"comma-separated presets or spec files, each with an encode_jpeg followed by a decode")
	seed := fs.Uint64("seed", 1, "run seed for the ops' random draws (the same crops in every pipeline)")
	epochs := fs.Int("epochs", 1, "epochs of random draws per sample (epochs 0..N-1)")
	jsonOut := fs.String("json", "", "also write the rows to this file as JSON")
	cropsOut := fs.String("crops", "", "also write one CSV line per crop to this file: set, pipeline, file, epoch, PSNR, JPEG bytes, the file's bytes")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `testbed fidelity: what a pipeline's JPEG round trip (encode_jpeg, decode) does to
its crops. For every sample and epoch it runs the pipeline up to encode_jpeg,
then the round trip, and compares the two images (the crop the same pipeline
without the round trip would deliver, for the same seed): PSNR (mean, 5th
percentile, min), the largest channel error and the JPEG's size.

Example:
  testbed fidelity --data photos/,gen/ --pipelines imagenet-train-q95,imagenet-train-q90

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *data == "" {
		fs.Usage()
		return fmt.Errorf("fidelity: --data is required")
	}
	if *epochs < 1 {
		return fmt.Errorf("fidelity: --epochs %d: want at least 1", *epochs)
	}
	var rows []fidelityRow
	var cw *csv.Writer
	if *cropsOut != "" {
		f, err := os.Create(*cropsOut)
		if err != nil {
			return err
		}
		defer f.Close()
		cw = csv.NewWriter(f)
		if err := cw.Write([]string{"set", "pipeline", "file", "epoch", "psnr_db", "jpeg_bytes", "file_bytes"}); err != nil {
			return err
		}
	}
	for _, dir := range strings.Split(*data, ",") {
		paths, err := testbed.ListJPEGs(dir)
		if err != nil {
			return err
		}
		samples, err := readAll(paths, dir)
		if err != nil {
			return err
		}
		for _, name := range strings.Split(*pipelines, ",") {
			p, err := ops.LoadPipeline(name)
			if err != nil {
				return err
			}
			row, crops, err := measureFidelity(p, samples, *seed, *epochs, func(i int, err error) {
				log.Warn().Str("path", paths[i]).Err(err).Msg("sample failed")
			})
			if err != nil {
				return err
			}
			row.Set = filepath.Base(filepath.Clean(dir))
			rows = append(rows, row)
			for _, c := range crops {
				if cw == nil {
					break
				}
				if err := cw.Write([]string{row.Set, row.Pipeline, paths[c.Sample], strconv.FormatUint(c.Epoch, 10),
					strconv.FormatFloat(c.PSNR, 'f', 3, 64), strconv.Itoa(c.JPEGBytes), strconv.Itoa(len(samples[c.Sample]))}); err != nil {
					return err
				}
			}
		}
	}
	if cw != nil {
		if cw.Flush(); cw.Error() != nil {
			return cw.Error()
		}
	}
	if err := printFidelity(rows, *seed, *epochs); err != nil {
		return err
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(rows, "", " ")
		if err != nil {
			return err
		}
		return os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

// roundTrip returns the index of p's encode_jpeg op, which a decode must
// follow.
func roundTrip(p *ops.Pipeline) (int, error) {
	for j := range p.Len() - 1 {
		if p.Op(j).Name() == "encode_jpeg" && p.Op(j+1).Name() == "decode" {
			return j, nil
		}
	}
	return 0, fmt.Errorf("%w: %s", errNoRoundTrip, p.Name())
}

// measureFidelity compares, for every sample and epoch 0..epochs-1, the
// image entering p's encode_jpeg with the one its decode returns: the
// row, and every crop's own comparison in sample and epoch order. A
// sample the pipeline refuses is passed to failed and left out.
func measureFidelity(p *ops.Pipeline, samples [][]byte, seed uint64, epochs int, failed func(i int, err error)) (fidelityRow, []fidelityCrop, error) {
	row := fidelityRow{Pipeline: p.Name()}
	j, err := roundTrip(p)
	if err != nil {
		return row, nil, err
	}
	var crops []fidelityCrop
	var psnrs []float64
	var jpegBytes, cropBytes float64
	for i, raw := range samples {
		for epoch := range uint64(epochs) {
			key := ops.Key{Seed: seed, Epoch: epoch, Sample: uint64(i)}
			before, encoded, after, err := runRoundTrip(p, j, key, raw)
			if err != nil {
				failed(i, err)
				row.Failed++
				break
			}
			psnr, maxErr := comparePix(before.Pix, after.Pix)
			psnrs = append(psnrs, psnr)
			crops = append(crops, fidelityCrop{Sample: i, Epoch: epoch, PSNR: psnr, JPEGBytes: encoded.Size()})
			row.MaxAbsErr = max(row.MaxAbsErr, maxErr)
			jpegBytes += float64(encoded.Size())
			cropBytes += float64(before.Size())
		}
	}
	row.Samples = len(psnrs)
	if row.Samples == 0 {
		return row, nil, fmt.Errorf("fidelity: %s: no sample went through", p.Name())
	}
	n := float64(row.Samples)
	for _, v := range psnrs {
		row.MeanPSNR += v / n
	}
	slices.Sort(psnrs)
	row.MinPSNR = psnrs[0]
	row.P5PSNR = psnrs[int(0.05*float64(len(psnrs)-1)+0.5)]
	row.MeanJPEGBytes, row.MeanCropBytes = jpegBytes/n, cropBytes/n
	return row, crops, nil
}

// runRoundTrip runs ops[0:j] of p on raw, then encode_jpeg (op j) and its
// decode (op j+1): the image before, the JPEG and the image after.
func runRoundTrip(p *ops.Pipeline, j int, key ops.Key, raw []byte) (before *ops.Image, encoded ops.Value, after *ops.Image, err error) {
	v, err := p.Run(key, ops.Encoded(raw), 0, j)
	if err != nil {
		return nil, nil, nil, err
	}
	before, ok := v.(*ops.Image)
	if !ok {
		return nil, nil, nil, fmt.Errorf("fidelity: sample %d: encode_jpeg's input is %T, not an image", key.Sample, v)
	}
	if encoded, err = p.Run(key, before, j, j+1); err != nil {
		return nil, nil, nil, err
	}
	v, err = p.Run(key, encoded, j+1, j+2)
	if err != nil {
		return nil, nil, nil, err
	}
	if after, ok = v.(*ops.Image); !ok || after.W != before.W || after.H != before.H {
		return nil, nil, nil, fmt.Errorf("fidelity: sample %d: the round trip returned %T of another size", key.Sample, v)
	}
	return before, encoded, after, nil
}

// comparePix returns the PSNR of b against a in dB (peak 255, capped at
// maxPSNR) and their largest absolute difference. a and b have one length.
func comparePix(a, b []uint8) (psnr float64, maxErr int) {
	var sse float64
	for i := range a {
		d := int(a[i]) - int(b[i])
		sse += float64(d * d)
		maxErr = max(maxErr, d, -d)
	}
	if sse == 0 {
		return maxPSNR, 0
	}
	return min(maxPSNR, 10*math.Log10(255*255*float64(len(a))/sse)), maxErr
}

// printFidelity writes the rows as a table on stdout.
func printFidelity(rows []fidelityRow, seed uint64, epochs int) error {
	fmt.Printf("JPEG round trip against the same crop without it (seed %d, %d epoch(s) per sample), decoder %s\n\n", seed, epochs, ops.JPEGBackend)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "set\tpipeline\tcrops\tfailed\tmean dB\tp5 dB\tmin dB\tmax abs err\tJPEG bytes\tuint8 crop bytes\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%d\t%.0f\t%.0f\t\n", r.Set, r.Pipeline, r.Samples, r.Failed,
			r.MeanPSNR, r.P5PSNR, r.MinPSNR, r.MaxAbsErr, r.MeanJPEGBytes, r.MeanCropBytes)
	}
	return tw.Flush()
}
