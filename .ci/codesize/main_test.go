package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckTable: -check passes a table written by -write and a line count
// within countSlack, and fails a missing or extra package, a changed
// purpose or import, and a count past the slack.
func TestCheckTable(t *testing.T) {
	tree := func() map[string]*pkg {
		return map[string]*pkg{
			"a":   {path: "a", lines: 1000, purpose: "Package a does a.", imports: map[string]bool{"b": true}},
			"b":   {path: "b", lines: 20, gen: 300, purpose: "Package b does b.", imports: map[string]bool{}},
			"cmd": {path: "cmd", lines: 3100, purpose: "Command cmd.", imports: map[string]bool{"a": true, "b": true}},
		}
	}
	path := filepath.Join(t.TempDir(), "arch.md")
	doc := "# Arch\n\n" + tableHeader + "\n|---|---:|---|---|\n| `old` | 1 | x | |\n\nAfter the table.\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	pkgs := tree()
	rows := []string{tableHeader, "|---|---:|---|---|"}
	for _, d := range []string{"a", "b", "cmd"} {
		rows = append(rows, pkgs[d].row(3000))
	}
	if err := writeTable(path, rows); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if got := string(b); !strings.HasPrefix(got, "# Arch\n\n"+tableHeader) || !strings.HasSuffix(got, "|\n\nAfter the table.\n") || strings.Contains(got, "`old`") {
		t.Fatalf("-write left:\n%s", got)
	}
	if !strings.Contains(string(b), "| `cmd` | 3100 OVER | Command cmd. | a, b |") {
		t.Fatalf("-write: no cmd row in\n%s", b)
	}
	for _, c := range []struct {
		name  string
		edit  func(map[string]*pkg)
		stale bool
	}{
		{"as written", func(map[string]*pkg) {}, false},
		{"a grew within the slack", func(p map[string]*pkg) { p["a"].lines += 100 }, false},
		{"b's generated code grew within the slack", func(p map[string]*pkg) { p["b"].gen += 30 }, false},
		{"a grew past the slack", func(p map[string]*pkg) { p["a"].lines += 150 }, true},
		{"b shrank past 50 lines", func(p map[string]*pkg) { p["b"].gen -= 51 }, true},
		{"a purpose changed", func(p map[string]*pkg) { p["a"].purpose = "Package a does c." }, true},
		{"an import added", func(p map[string]*pkg) { p["b"].imports["a"] = true }, true},
		{"a package added", func(p map[string]*pkg) { p["d"] = &pkg{path: "d", imports: map[string]bool{}} }, true},
		{"a package removed", func(p map[string]*pkg) { delete(p, "b") }, true},
	} {
		p := tree()
		c.edit(p)
		stale, err := checkTable(path, p, 3000)
		if err != nil {
			t.Fatal(err)
		}
		if stale != c.stale {
			t.Errorf("%s: stale %v, want %v", c.name, stale, c.stale)
		}
	}
}
