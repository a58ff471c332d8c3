package s3src

import (
	"encoding/xml"
	"testing"
)

// FuzzParseListPage: parsePage reads any bytes without panicking, and
// what it reads of a page survives encoding it again.
func FuzzParseListPage(f *testing.F) {
	f.Add([]byte(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><IsTruncated>true</IsTruncated><NextContinuationToken>T</NextContinuationToken><Contents><Key>p/a.jpg</Key><Size>1</Size></Contents></ListBucketResult>`))
	f.Add([]byte(`<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>`))
	f.Add([]byte(`<Error><Code>SlowDown</Code></Error>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePage(b)
		if err != nil {
			return
		}
		r := listResult{IsTruncated: p.truncated, NextContinuationToken: p.next, Contents: make([]struct{}, p.keys)}
		again, err := xml.Marshal(r)
		if err != nil {
			t.Fatalf("encode %+v: %v", r, err)
		}
		q, err := parsePage(again)
		if err != nil || q != p {
			t.Fatalf("%q read as %+v, encoded as %s, read again as %+v (%v)", b, p, again, q, err)
		}
	})
}
