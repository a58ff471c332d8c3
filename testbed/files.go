// Package testbed emulates the storage node and the GPU node on one machine
// and compares offloading policies. This file lists datasets on disk.
package testbed

import (
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// ListJPEGs returns the JPEG files under dir (recursively, *.jpg and
// *.jpeg in any case), sorted by path so sample indices are stable.
func ListJPEGs(dir string) ([]string, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			switch strings.ToLower(filepath.Ext(p)) {
			case ".jpg", ".jpeg":
				paths = append(paths, p)
			}
		}
		return nil
	})
	sort.Strings(paths)
	return paths, err
}
