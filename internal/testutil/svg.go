package testutil

import (
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// SVGElement is one element of an SVG document as ParseSVG saw it: its
// name, attributes and text.
type SVGElement struct {
	Name string
	Attr map[string]string
	Text string
}

// ParseSVG decodes every element of an SVG document in order, failing tb
// on bad XML or a document whose root is not svg.
func ParseSVG(tb testing.TB, data []byte) []SVGElement {
	tb.Helper()
	d := xml.NewDecoder(strings.NewReader(string(data)))
	var els []SVGElement
	var open []int
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatalf("bad XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := SVGElement{Name: tok.Name.Local, Attr: map[string]string{}}
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
		tb.Fatalf("not an SVG document")
	}
	return els
}

// SVGByClass is the elements of els whose class attribute is class.
func SVGByClass(els []SVGElement, class string) []SVGElement {
	var out []SVGElement
	for _, e := range els {
		if e.Attr["class"] == class {
			out = append(out, e)
		}
	}
	return out
}
