package testutil

import "testing"

// TestDemanded: outside CI only the requirements DemandEnv lists are
// demanded; under CI=true all are.
func TestDemanded(t *testing.T) {
	for _, tc := range []struct {
		ci, demand, name string
		want             bool
	}{
		{"", "", "versitygw", false},
		{"", "versitygw", "versitygw", true},
		{"", "torch,versitygw", "versitygw", true},
		{"", "torch,versitygw", "tc", false},
		{"", "versitygw2", "versitygw", false},
		{"true", "", "tc", true},
		{"false", "", "tc", false},
	} {
		t.Setenv("CI", tc.ci)
		t.Setenv(DemandEnv, tc.demand)
		if got := Demanded(tc.name); got != tc.want {
			t.Errorf("CI=%q %s=%q: Demanded(%q) = %v, want %v", tc.ci, DemandEnv, tc.demand, tc.name, got, tc.want)
		}
	}
}
