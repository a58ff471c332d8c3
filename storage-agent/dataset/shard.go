package dataset

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
)

// member is a sample found in a shard while indexing it.
type member struct {
	key       string
	image     string // member name of the image
	off, size int64
	hasImage  bool
	cls       string // the .cls text, if any
	hasCls    bool
	badCls    bool // the .cls is too long
}

// memberSkip is a member indexShard left out.
type memberSkip struct {
	name   string
	reason SkipReason
	detail string
}

// indexShards opens the tar files names and catalogs their samples.
func (ix *indexer) indexShards(names []string) {
	var shards []shardFile
	for _, name := range names {
		f, fi, err := openChecked(ix.d.root, name, nil)
		if err != nil {
			ix.skipErr(name, err)
			continue
		}
		shards = append(shards, shardFile{name: name, r: f, id: idOf(fi), mtime: mtimeOf(fi)})
	}
	ix.catalogShards(shards)
}

// found is a sample found in shard d.shards[shard] while indexing.
type found struct {
	shard int
	m     *member
}

// catalogShards walks each open shard's tar headers, keeps the shards with
// samples (closing the others) and labels the samples.
func (ix *indexer) catalogShards(shards []shardFile) {
	d := ix.d
	var all []found
	for i, sf := range shards {
		if ix.ctx.Err() != nil {
			for _, rest := range shards[i:] {
				rest.r.Close()
			}
			break // run reports it
		}
		members, skips, err := indexShard(sf.r, sf.id.size)
		for _, s := range skips {
			ix.skip(sf.name+"/"+s.name, s.reason, s.detail)
		}
		if err != nil {
			if len(members) == 0 {
				ix.skip(sf.name, SkipBadShard, err.Error())
				sf.r.Close()
				continue
			}
			ix.skip(sf.name, SkipCutShard, fmt.Sprintf("%v (the %d samples before it are served)", err, len(members)))
		}
		si := len(d.shards)
		d.shards = append(d.shards, sf)
		for _, m := range members {
			all = append(all, found{si, m})
		}
	}
	withCls := 0
	for _, x := range all {
		if x.m.hasCls {
			withCls++
		}
	}
	if withCls > 0 {
		ix.labelByCls(all, withCls)
	} else {
		ix.labelByFolder(all)
	}
}

// labelByCls labels the samples by their .cls members (withCls of them
// have one) and names the classes "0".."max"; a sample without a class
// number is skipped.
func (ix *indexer) labelByCls(all []found, withCls int) {
	d := ix.d
	maxLabel := -1
	for _, x := range all {
		rel := d.shardName(x.shard) + "/" + x.m.image
		if !x.m.hasCls {
			ix.skip(rel, SkipBadLabel, fmt.Sprintf("no .cls member while %d samples have one", withCls))
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(x.m.cls), 10, 31)
		if err != nil || x.m.badCls {
			ix.skip(rel, SkipBadLabel, fmt.Sprintf(".cls %q is not a class number", x.m.cls))
			continue
		}
		maxLabel = max(maxLabel, int(v))
		d.samples = append(d.samples, d.shardSample(x.shard, x.m, uint32(v)))
	}
	for i := 0; i <= maxLabel; i++ {
		d.classes = append(d.classes, strconv.Itoa(i))
	}
}

// labelByFolder labels the samples by their parent folder's name, the
// names sorted into labels 0..C-1.
func (ix *indexer) labelByFolder(all []found) {
	d := ix.d
	set := map[string]bool{}
	for _, x := range all {
		set[path.Base(path.Dir(x.m.key))] = true
	}
	var raw []string
	for c := range set {
		raw = append(raw, c)
	}
	slices.Sort(raw)
	labels := make(map[string]uint32, len(raw))
	for i, c := range raw {
		labels[c] = uint32(i)
		d.classes = append(d.classes, DisplayName(c))
	}
	for _, x := range all {
		d.samples = append(d.samples, d.shardSample(x.shard, x.m, labels[path.Base(path.Dir(x.m.key))]))
	}
}

// shardName is shard si's file name.
func (d *Dataset) shardName(si int) string { return d.shards[si].name }

func (d *Dataset) shardSample(si int, m *member, label uint32) sample {
	sf := d.shards[si]
	return sample{rel: d.shardName(si) + "/" + m.image, shard: si, off: m.off, size: m.size, label: label,
		id: fileID{dev: sf.id.dev, ino: sf.id.ino}, mtime: sf.mtime}
}

// maxClsBytes bounds a .cls member read while indexing.
const maxClsBytes = 64

// indexShard walks the tar headers of the size-byte shard r once and
// returns its samples in the order of their images, the members it left
// out, and the error that stopped it early, if any: the members before a
// damaged or cut part are returned. NB: tar.Reader reads a header without
// reading ahead, so right after Next the section's offset is the member's
// first data byte; it skips unread data with Seek, so indexing does not
// read images.
func indexShard(r io.ReaderAt, size int64) (order []*member, skips []memberSkip, err error) {
	f := io.NewSectionReader(r, 0, size)
	tr := tar.NewReader(f)
	byKey := map[string]*member{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return order, skips, nil
		}
		if err != nil {
			return order, skips, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(path.Clean(h.Name), "./")
		base := path.Base(name)
		dot := strings.IndexByte(base, '.')
		if dot <= 0 {
			continue
		}
		key := path.Join(path.Dir(name), base[:dot])
		ext := strings.ToLower(base[dot:])
		m := byKey[key]
		if m == nil {
			m = &member{key: key}
			byKey[key] = m
		}
		switch {
		case ext == ".jpg" || ext == ".jpeg":
			off, err := f.Seek(0, io.SeekCurrent)
			if err != nil {
				return order, skips, err
			}
			if h.Size > size-off {
				// NB: the reader seeks over data, so a cut shard shows
				// only here.
				return order, skips, fmt.Errorf("member %s: %d bytes at offset %d overrun the %d-byte shard", DisplayName(name), h.Size, off, size)
			}
			if m.hasImage {
				skips = append(skips, memberSkip{name, SkipDuplicate, fmt.Sprintf("sample %s has an image already (%s)", DisplayName(key), DisplayName(m.image))})
				continue
			}
			m.image, m.off, m.size, m.hasImage = name, off, h.Size, true
			order = append(order, m)
		case ext == ".cls":
			b, err := io.ReadAll(io.LimitReader(tr, maxClsBytes+1))
			if err != nil {
				return order, skips, err
			}
			if len(b) > maxClsBytes {
				b, m.badCls = b[:maxClsBytes], true
			}
			m.cls, m.hasCls = string(b), true
		}
	}
}
