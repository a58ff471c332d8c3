package shape

import (
	"fmt"
	"strings"
	"time"
)

// Step is one change of a Schedule: the link goes to Rate At into the
// span the schedule is laid over.
type Step struct {
	At   time.Duration
	Rate Rate
}

// Schedule is a link rate that changes over time, a list of steps in
// ascending order of their offsets ("0s:100mbit,3s:50mbit,6s:100mbit"):
// the testbed's --rate-schedule, laid over each planned epoch. It
// implements flag.Value; the zero Schedule is none.
type Schedule []Step

// ParseSchedule reads "OFFSET:RATE,..." (offsets as time.ParseDuration
// reads them, rates as ParseRate): at least one step, offsets at least 0
// and strictly ascending. Anything else is ErrRate.
func ParseSchedule(s string) (Schedule, error) {
	var out Schedule
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		at, rate, ok := strings.Cut(f, ":")
		if !ok {
			return nil, fmt.Errorf("%w: schedule step %q: want OFFSET:RATE, e.g. 3s:50mbit", ErrRate, f)
		}
		d, err := time.ParseDuration(strings.TrimSpace(at))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%w: schedule step %q: offset %q: want a duration of at least 0 (3s, 1500ms)", ErrRate, f, at)
		}
		r, err := ParseRate(rate)
		if err != nil {
			return nil, fmt.Errorf("schedule step %q: %w", f, err)
		}
		if n := len(out); n > 0 && d <= out[n-1].At {
			return nil, fmt.Errorf("%w: schedule step %q: offset %v not after the step before's %v", ErrRate, f, d, out[n-1].At)
		}
		out = append(out, Step{At: d, Rate: r})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %q: no step in the schedule", ErrRate, s)
	}
	return out, nil
}

// String gives the schedule as ParseSchedule reads it.
func (s Schedule) String() string {
	parts := make([]string, len(s))
	for i, st := range s {
		parts[i] = st.At.String() + ":" + st.Rate.String()
	}
	return strings.Join(parts, ",")
}

// Set parses v into s, replacing what it held (flag.Value).
func (s *Schedule) Set(v string) error {
	p, err := ParseSchedule(v)
	if err != nil {
		return err
	}
	*s = p
	return nil
}
