package dataset

import (
	"io/fs"
	"path"
	"slices"
	"strings"
)

func isJPEGName(name string) bool {
	ext := strings.ToLower(path.Ext(name))
	return ext == ".jpg" || ext == ".jpeg"
}

func (ix *indexer) indexFolders(ents []fs.DirEntry) {
	d := ix.d
	for _, e := range ents {
		switch {
		case strings.HasPrefix(e.Name(), indexName):
			// The index file and its temporaries are no class.
		case e.IsDir():
			d.classes = append(d.classes, e.Name())
		case e.Type()&fs.ModeSymlink != 0:
			// A class folder may be a symlink, if it stays inside.
			fi, err := d.root.Stat(e.Name())
			if err != nil {
				ix.skipErr(e.Name(), err)
			} else if fi.IsDir() {
				d.classes = append(d.classes, e.Name())
			}
		}
	}
	// Listing a large folder (a stat per file) takes a while too; its
	// total is unknown, so its progress has no ETA.
	prog := startProgress(ix.opts.Logger, "listing", ix.opts.Progress, 0, 0)
	defer prog.end()
	for label, class := range d.classes {
		if ix.ctx.Err() != nil {
			return // run reports it
		}
		var files []sample
		ix.walk(class, uint32(label), &files, prog)
		slices.SortFunc(files, func(a, b sample) int { return strings.Compare(a.rel, b.rel) })
		d.samples = append(d.samples, files...)
		d.classes[label] = DisplayName(class)
	}
}

// walk adds the JPEGs below dir. It descends into real folders only, so a
// symlink cannot make it loop.
func (ix *indexer) walk(dir string, label uint32, files *[]sample, prog *progress) {
	ents, err := readDir(ix.d.root, dir)
	if err != nil {
		ix.skipErr(dir, err)
		return
	}
	for _, e := range ents {
		rel := dir + "/" + e.Name()
		switch {
		case e.IsDir():
			ix.walk(rel, label, files, prog)
		case !isJPEGName(e.Name()):
		default:
			fi, err := ix.d.root.Stat(rel) // follows a symlink that stays inside
			if err != nil {
				ix.skipErr(rel, err)
				continue
			}
			if !fi.Mode().IsRegular() {
				ix.skip(rel, SkipNotRegular, modeName(fi.Mode()))
				continue
			}
			*files = append(*files, sample{rel: rel, shard: -1, size: fi.Size(), label: label, id: idOf(fi), mtime: mtimeOf(fi)})
			prog.add(fi.Size())
		}
	}
}
