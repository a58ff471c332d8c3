package ops

// Op is one preprocessing step. Apply must be a pure function of its input
// and of the draws it takes from r: no other state, no goroutine identity,
// no clock. Apply must not modify in; it may return in itself when it has
// nothing to do.
type Op interface {
	// Name is the op's spec name, e.g. "random_resized_crop".
	Name() string
	// In is the representation the op accepts.
	In() Kind
	// Out is the representation the op produces.
	Out() Kind
	// Apply runs the op. r is seeded for this (run, epoch, sample, op).
	Apply(in Value, r *Rand) (Value, error)
}

func checkKind(op Op, in Value) error {
	if in == nil || in.Kind() != op.In() {
		got := "nil"
		if in != nil {
			got = in.Kind().String()
		}
		return wrapf(ErrKind, "%s takes %s, got %s", op.Name(), op.In(), got)
	}
	return nil
}
