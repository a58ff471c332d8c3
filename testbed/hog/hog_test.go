package hog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/testbed/bed"
	"github.com/sophon-dl/sophon/testbed/cgroup"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/shape"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// Whatever a failed test left is removed, and fails the run.
	if left := bed.RemoveLeftovers(); len(left) > 0 {
		println("leftover namespaces, links or cgroups:", strings.Join(left, ", "))
		code = 1
	}
	os.Exit(code)
}

// TestStartNeedsGroup: a bed without a storage cgroup (loopback) has
// nowhere to put a hog.
func TestStartNeedsGroup(t *testing.T) {
	ctx := context.Background()
	b, err := bed.New(ctx, bed.Config{Links: []shape.Rate{shape.MustParseRate("1gbit")}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := Start(ctx, b, "true", 1, filepath.Join(t.TempDir(), "hog.log")); !errors.Is(err, ErrNoStorageGroup) {
		t.Errorf("got %v, want ErrNoStorageGroup", err)
	}
}

// fakeHog is a `testbed hog --gate` stand-in: it waits for its gate line,
// then spins.
const fakeHog = "#!/bin/sh\nread line\nwhile :; do :; done\n"

// TestContend: the hog waits at its gate, in the storage cgroup, until the
// report shows the epochs asked for, then spins until ctx ends; Stop
// gives when its gate opened, after which epochs, and the CPU it took.
func TestContend(t *testing.T) {
	if err := netns.Available(); err != nil {
		testutil.Require(t, "namespaces unavailable (%v); CI runs this as root", err)
	}
	if err := cgroup.Available(); err != nil {
		testutil.Require(t, "cgroups unavailable (%v); CI runs this as root", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	bin := filepath.Join(dir, "hog.sh")
	if err := os.WriteFile(bin, []byte(fakeHog), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := bed.New(ctx, bed.Config{Netns: true, Label: "hog", Links: []shape.Rate{shape.MustParseRate("1gbit")}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.MakeGroups(1, bed.Pins{}, 0); err != nil {
		testutil.Require(t, "cgroups could not be made (%v)", err)
	}
	h, err := Start(ctx, b, bin, 1, filepath.Join(dir, "hog.log"))
	if err != nil {
		t.Fatal(err)
	}
	reportPath := filepath.Join(dir, "report.jsonl")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Contend(cctx, reportPath, 1, func(err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}()
	time.Sleep(3 * Poll)
	if u := h.usage(); !u.Opened.IsZero() {
		t.Fatal("the gate opened before the report showed an epoch")
	}
	const end = int64(1234567890)
	line := `{"epoch":0,"seconds":1,"end_unix_ns":1234567890}` + "\n"
	if err := os.WriteFile(reportPath, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.usage().Opened.IsZero() && time.Now().Before(deadline) {
		time.Sleep(Poll)
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done
	u := h.Stop()
	if u.Opened.IsZero() || u.After != 1 || u.LastEnd != end || u.Threads != 1 {
		t.Fatalf("usage %+v: want the gate opened after 1 epoch ending at %d", u, end)
	}
	if u.CPU <= 0 || u.Wall < 200*time.Millisecond {
		t.Errorf("usage %+v: want some CPU over at least 200 ms", u)
	}
	if log, _ := os.ReadFile(filepath.Join(dir, "hog.log")); strings.TrimSpace(string(log)) != "" {
		t.Logf("hog log: %s", log)
	}
}
