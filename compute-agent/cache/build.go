package cache

import (
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// Build names the running process's build for Options.Build: codec (the
// codec's name, e.g. "libjpeg-turbo"), the Go toolchain, and a digest of
// the executable's Go build ID (a hash of everything linked into it; the
// whole file's SHA-256 when it has none) and of the content of each
// shared library mapped into the process whose file name holds one of
// libs (a dynamically linked codec upgraded alone changes numerics
// without touching the binary; read from Linux's /proc/self/maps, none
// elsewhere). A rebuild from the same sources with the same libraries
// keeps the name; anything else changes it.
func Build(codec string, libs ...string) string {
	h := sha256.New()
	io.WriteString(h, codec+"\x00"+runtime.Version()+"\x00")
	if exe, err := os.Executable(); err == nil {
		h.Write(goBuildID(exe))
	}
	for _, lib := range mappedLibs(libs) {
		io.WriteString(h, lib+"\x00")
		h.Write(fileSHA(lib))
	}
	return codec + " " + runtime.Version() + " " + hex.EncodeToString(h.Sum(nil)[:12])
}

// goBuildID is the Go build ID note of executable exe, or the SHA-256 of
// the whole file when it has none.
func goBuildID(exe string) []byte {
	if f, err := elf.Open(exe); err == nil {
		defer f.Close()
		if sec := f.Section(".note.go.buildid"); sec != nil && sec.Size < 1<<16 {
			if b, err := sec.Data(); err == nil {
				return b
			}
		}
	}
	return fileSHA(exe)
}

// fileSHA is the SHA-256 of file path (nil when it cannot be read).
func fileSHA(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, 1<<30)); err != nil {
		return nil
	}
	return h.Sum(nil)
}

// mappedLibs are the files mapped into the process whose names hold one
// of names, sorted.
func mappedLibs(names []string) []string {
	f, err := os.Open("/proc/self/maps")
	if err != nil || len(names) == 0 {
		return nil
	}
	defer f.Close()
	var libs []string
	sc := bufio.NewScanner(io.LimitReader(f, 16<<20))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") || slices.Contains(libs, fields[5]) {
			continue
		}
		if base := filepath.Base(fields[5]); slices.ContainsFunc(names, func(n string) bool { return strings.Contains(base, n) }) {
			libs = append(libs, fields[5])
		}
	}
	slices.Sort(libs)
	return libs
}
