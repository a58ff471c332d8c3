package bytesize

import (
	"errors"
	"testing"
)

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

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"4096", 4096}, {"7b", 7}, {"7 B", 7}, {"1.5e3", 1500},
		{"2K", 2 << 10}, {"2k", 2 << 10}, {"2KiB", 2 << 10}, {"2kib", 2 << 10}, {"2kB", 2000}, {"2KB", 2000},
		{"512M", 512 << 20}, {"512MiB", 512 << 20}, {"512MB", 512e6}, {"512mb", 512e6},
		{"2G", 2 << 30}, {"2g", 2 << 30}, {"2GiB", 2 << 30}, {"2 GiB", 2 << 30}, {"2GB", 2e9}, {"1.5GB", 1.5e9},
		{"1T", 1 << 40}, {"1TiB", 1 << 40}, {"1TB", 1e12}, {" 10 KiB ", 10240}, {"1.5KiB", 1536}, {"0.5B", 0},
	} {
		if got, err := Parse(c.in); err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "x", "B", "GiB", "-1", "-1K", "NaN", "inf", "1e300", "5 parsecs", "2Gi", "2 G B", "8EiB", "5000000T"} {
		if n, err := Parse(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %d, %v; want ErrSyntax", in, n, err)
		}
	}
}
