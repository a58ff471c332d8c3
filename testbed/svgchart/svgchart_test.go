package svgchart

import (
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// element is one SVG element as the decoder saw it.
type element struct {
	Name string
	Attr map[string]string
	Text string
}

// parseSVG decodes every token of an SVG, failing the test on bad XML.
func parseSVG(t *testing.T, data []byte) []element {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(data)))
	var els []element
	var open []int
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("bad XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := element{Name: tok.Name.Local, Attr: map[string]string{}}
			for _, a := range tok.Attr {
				e.Attr[a.Name.Local] = a.Value
			}
			els = append(els, e)
			open = append(open, len(els)-1)
		case xml.EndElement:
			open = open[:len(open)-1]
		case xml.CharData:
			if len(open) > 0 {
				els[open[len(open)-1]].Text += string(tok)
			}
		}
	}
	if len(els) == 0 || els[0].Name != "svg" {
		t.Fatalf("not an SVG document")
	}
	return els
}

func byClass(els []element, class string) []element {
	var out []element
	for _, e := range els {
		if e.Attr["class"] == class {
			out = append(out, e)
		}
	}
	return out
}

func TestChartEscapesText(t *testing.T) {
	odd := `a<b & "c" 'd'`
	c := Bar{
		Title:      "title " + odd,
		YLabel:     odd,
		Categories: []string{odd, "plain"},
		Series:     []BarSeries{{Name: odd, Color: "#000000", Values: []float64{1, 2}}},
		Bound:      0.5, BoundLabel: odd,
	}
	els := parseSVG(t, c.SVG())
	bars := byClass(els, "bar")
	if len(bars) != 2 || bars[0].Attr["data-category"] != odd {
		t.Errorf("got bars %v, want the first named %q", bars, odd)
	}
	l := Line{
		Title: odd, XLabel: odd, YLabel: odd,
		XTicks: []XTick{{1, odd}, {2, "2"}},
		Series: []LineSeries{{Name: odd, Color: "#000000", X: []float64{1, 2}, Y: []float64{3, 4}}},
	}
	if got := byClass(parseSVG(t, l.SVG()), "point"); len(got) != 2 || got[0].Attr["data-series"] != odd {
		t.Errorf("got points %v, want 2 named %q", got, odd)
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tt := range []struct {
		max  float64
		want []float64
	}{
		{9.5, []float64{0, 2, 4, 6, 8, 10}},
		{10, []float64{0, 2, 4, 6, 8, 10}},
		{0.37, []float64{0, 0.1, 0.2, 0.3, 0.4}},
		{100, []float64{0, 20, 40, 60, 80, 100}},
		{1234, []float64{0, 500, 1000, 1500}},
		{0, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
	} {
		if got, _ := niceTicks(tt.max, 5); !slices.Equal(got, tt.want) {
			t.Errorf("niceTicks(%v): got %v, want %v", tt.max, got, tt.want)
		}
	}
}
