package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"}, {999, "999 bytes"}, {1024, "1 KiB"}, {128 << 20, "128 MiB"}, {3 << 30, "3 GiB"},
		{180000000, "180.0 MB"}, {1500, "1.5 kB"}, {3221225473, "3.2 GB"},
	} {
		if got := Format(c.n); got != c.want {
			t.Errorf("Format(%d): got %q, want %q", c.n, got, c.want)
		}
	}
}
