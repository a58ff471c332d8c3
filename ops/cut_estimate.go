package ops

// CutRegion is the region of a w x h image a cut for key keeps before the
// backend rounds it out to whole iMCUs: ops[1]'s crop box for key widened
// by CutMargin on every side, clamped to the image. It needs only the
// dimensions, which a JPEG's header gives, so a planner can predict a cut
// without cutting.
func (p *Pipeline) CutRegion(w, h int, key Key) (Rect, error) {
	_, c, err := p.cutOps()
	if err != nil {
		return Rect{}, err
	}
	if w < 1 || h < 1 {
		return Rect{}, wrapf(ErrCorrupt, "image of %dx%d", w, h)
	}
	var r Rand
	r.Seed(SeedFor(key.Seed, key.Epoch, key.Sample, 1))
	return cutRegion(w, h, SampleRRCBox(w, h, c.Params, &r)), nil
}

// cutRegion widens box by CutMargin, clamped to the w x h image.
func cutRegion(w, h int, box Rect) Rect {
	want := Rect{X: max(0, box.X-CutMargin), Y: max(0, box.Y-CutMargin)}
	want.W = min(w, box.X+box.W+CutMargin) - want.X
	want.H = min(h, box.Y+box.H+CutMargin) - want.Y
	return want
}
