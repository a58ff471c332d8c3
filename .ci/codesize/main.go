// Command codesize reports the size of the house: the longest functions and
// the packages with their lines, purpose and imports. `make lint` runs it and
// fails when a limit is passed; docs/architecture.md's package table is its
// output.
//
//	go run ./.ci/codesize funcs [-max 80] [-top 15] DIR...
//	go run ./.ci/codesize packages [-max 3000] [-write FILE | -check FILE]
//
// funcs prints the longest non-test functions under DIR (every DIR recursively)
// and exits 1 when a non-table function is longer than -max lines. A table
// function is one whose lines are mostly inside composite literals (a flag
// table, a list of cases): its length is data, not control flow.
//
// packages prints a Markdown table of every package in the module: non-test
// lines (generated files apart), the first sentence of its package comment
// and the module's packages it imports; it exits 1 when a package has more
// than -max non-test, non-generated lines. With -write it also replaces the
// table in FILE (the lines from its header row to the first line that is
// not a row) by the one printed; with -check it prints nothing and exits 1
// when FILE's table differs from the tree's: a package missing or extra, a
// purpose or an import list changed, or a line count off by more than
// countSlack. Line counts move with every commit, so only a large move
// makes the table stale; `make size` rewrites it.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const module = "github.com/sophon-dl/sophon"

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	var over bool
	switch os.Args[1] {
	case "funcs":
		over, err = funcs(os.Args[2:])
	case "packages":
		over, err = packages(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "codesize:", err)
		os.Exit(2)
	}
	if over {
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: codesize funcs [-max 80] [-top 15] DIR... | codesize packages [-max 3000] [-write FILE | -check FILE]")
	os.Exit(2)
}

// goFiles lists the .go files under root, skipping hidden and testdata
// folders and, unless tests is set, _test.go files.
func goFiles(root string, tests bool) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && (tests || !strings.HasSuffix(name, "_test.go")) {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

type fn struct {
	pos   string
	name  string
	lines int
	table bool
}

func funcs(args []string) (bool, error) {
	fset := flag.NewFlagSet("funcs", flag.ExitOnError)
	max := fset.Int("max", 80, "longest non-table function allowed, in lines")
	top := fset.Int("top", 15, "functions to print")
	fset.Parse(args)
	var all []fn
	for _, dir := range fset.Args() {
		files, err := goFiles(dir, false)
		if err != nil {
			return false, err
		}
		for _, f := range files {
			fs, err := fileFuncs(f)
			if err != nil {
				return false, err
			}
			all = append(all, fs...)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].lines > all[j].lines })
	over := false
	for i, f := range all {
		bad := !f.table && f.lines > *max
		if bad {
			over = true
		}
		if i >= *top && !bad {
			continue
		}
		mark := ""
		switch {
		case bad:
			mark = fmt.Sprintf("  OVER %d", *max)
		case f.table:
			mark = "  (table)"
		}
		fmt.Printf("%5d  %s  %s%s\n", f.lines, f.name, f.pos, mark)
	}
	if over {
		fmt.Printf("codesize: functions over %d lines (split them into named steps)\n", *max)
	}
	return over, nil
}

func fileFuncs(path string) ([]fn, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	var out []fn
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
		n := end - start + 1
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) > 0 {
			name = "(" + recvType(fd.Recv.List[0].Type) + ")." + name
		}
		out = append(out, fn{
			pos:   fmt.Sprintf("%s:%d", path, start),
			name:  name,
			lines: n,
			table: 2*literalLines(fset, fd.Body) > n,
		})
	}
	return out, nil
}

func recvType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return "*" + recvType(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.IndexListExpr:
		return recvType(t.X)
	}
	return "?"
}

// literalLines counts the lines of body covered by outermost composite
// literals.
func literalLines(fset *token.FileSet, body *ast.BlockStmt) int {
	lines := map[int]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		cl, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		for l := fset.Position(cl.Pos()).Line; l <= fset.Position(cl.End()).Line; l++ {
			lines[l] = true
		}
		return false
	})
	return len(lines)
}

type pkg struct {
	path    string
	lines   int
	gen     int
	purpose string
	imports map[string]bool
}

func packages(args []string) (bool, error) {
	fset := flag.NewFlagSet("packages", flag.ExitOnError)
	max := fset.Int("max", 3000, "most non-test, non-generated lines a package may have")
	write := fset.String("write", "", "replace the package table in this Markdown file")
	check := fset.String("check", "", "fail when this Markdown file's package table is stale")
	fset.Parse(args)
	files, err := goFiles(".", false)
	if err != nil {
		return false, err
	}
	pkgs := map[string]*pkg{}
	for _, path := range files {
		if err := addFile(pkgs, path); err != nil {
			return false, err
		}
	}
	dirs := make([]string, 0, len(pkgs))
	for d := range pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	over := false
	rows := []string{tableHeader, "|---|---:|---|---|"}
	for _, d := range dirs {
		p := pkgs[d]
		if p.lines > *max {
			over = true
		}
		rows = append(rows, p.row(*max))
	}
	if over {
		fmt.Fprintf(os.Stderr, "codesize: packages over %d non-test lines (split them by concern)\n", *max)
	}
	switch {
	case *check != "":
		stale, err := checkTable(*check, pkgs, *max)
		if err != nil {
			return false, err
		}
		return over || stale, nil
	case *write != "":
		if err := writeTable(*write, rows); err != nil {
			return false, err
		}
	}
	fmt.Println(strings.Join(rows, "\n"))
	return over, nil
}

// tableHeader is the package table's first line, where -write and -check
// find it.
const tableHeader = "| package | lines | purpose | imports (this module) |"

// row is p's line of the table.
func (p *pkg) row(max int) string {
	return p.rowWith(p.linesCell(max))
}

func (p *pkg) rowWith(lines string) string {
	imps := make([]string, 0, len(p.imports))
	for i := range p.imports {
		imps = append(imps, i)
	}
	sort.Strings(imps)
	return fmt.Sprintf("| `%s` | %s | %s | %s |", p.path, lines, p.purpose, strings.Join(imps, ", "))
}

func (p *pkg) linesCell(max int) string {
	lines := fmt.Sprint(p.lines)
	if p.gen > 0 {
		lines += fmt.Sprintf(" (+%d generated)", p.gen)
	}
	if p.lines > max {
		lines += " OVER"
	}
	return lines
}

// countSlack is how far a table's line count may lag the tree's before
// -check calls the table stale: 10% of the package or 50 lines, whichever
// is more.
func countSlack(lines int) int { return max(50, lines/10) }

// tableRegion returns the lines of the file at path and the [start, end)
// indices of its package table.
func tableRegion(path string) ([]string, int, int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, 0, err
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if l != tableHeader {
			continue
		}
		end := i + 1
		for end < len(lines) && strings.HasPrefix(lines[end], "|") {
			end++
		}
		return lines, i, end, nil
	}
	return nil, 0, 0, fmt.Errorf("%s: no package table (a line %q)", path, tableHeader)
}

func writeTable(path string, rows []string) error {
	lines, start, end, err := tableRegion(path)
	if err != nil {
		return err
	}
	out := append(append(append([]string(nil), lines[:start]...), rows...), lines[end:]...)
	return os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644)
}

// checkTable reports on stderr how the table in path differs from pkgs and
// whether it does.
func checkTable(path string, pkgs map[string]*pkg, max int) (bool, error) {
	lines, start, end, err := tableRegion(path)
	if err != nil {
		return false, err
	}
	var problems []string
	seen := map[string]bool{}
	for _, row := range lines[start+2 : end] {
		dir, cell, ok := splitRow(row)
		if !ok {
			problems = append(problems, fmt.Sprintf("not a package row: %.60s", row))
			continue
		}
		seen[dir] = true
		p := pkgs[dir]
		if p == nil {
			problems = append(problems, fmt.Sprintf("%s: in the table, not in the tree", dir))
			continue
		}
		var n, gen int
		fmt.Sscanf(cell, "%d (+%d generated)", &n, &gen)
		if abs(n-p.lines) > countSlack(p.lines) || abs(gen-p.gen) > countSlack(p.gen) {
			problems = append(problems, fmt.Sprintf("%s: the table says %s lines, the tree has %s", dir, cell, p.linesCell(max)))
			continue
		}
		if want := p.rowWith(cell); row != want {
			problems = append(problems, fmt.Sprintf("%s: the purpose or imports changed:\n  table: %s\n  tree:  %s", dir, row, want))
		}
	}
	for dir := range pkgs {
		if !seen[dir] {
			problems = append(problems, fmt.Sprintf("%s: in the tree, not in the table", dir))
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		fmt.Fprintf(os.Stderr, "codesize: %s: %s\n", path, p)
	}
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "codesize: the package table is stale: run make size and commit it")
	}
	return len(problems) > 0, nil
}

// splitRow returns a table row's package folder and lines cell.
func splitRow(row string) (dir, lines string, ok bool) {
	rest, ok := strings.CutPrefix(row, "| `")
	if !ok {
		return "", "", false
	}
	dir, rest, ok = strings.Cut(rest, "` | ")
	if !ok {
		return "", "", false
	}
	lines, _, ok = strings.Cut(rest, " | ")
	return dir, lines, ok
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func addFile(pkgs map[string]*pkg, path string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	dir := filepath.ToSlash(filepath.Dir(path))
	p := pkgs[dir]
	if p == nil {
		p = &pkg{path: dir, imports: map[string]bool{}}
		pkgs[dir] = p
	}
	n := strings.Count(string(src), "\n")
	if ast.IsGenerated(f) {
		p.gen += n
	} else {
		p.lines += n
	}
	if f.Doc != nil && p.purpose == "" {
		p.purpose = firstSentence(f.Doc.Text())
	}
	for _, im := range f.Imports {
		ip := strings.Trim(im.Path.Value, `"`)
		if rel, ok := strings.CutPrefix(ip, module+"/"); ok {
			p.imports[rel] = true
		}
	}
	return nil
}

func firstSentence(doc string) string {
	doc = strings.Join(strings.Fields(doc), " ")
	if i := strings.Index(doc, ". "); i >= 0 {
		doc = doc[:i+1]
	}
	return strings.ReplaceAll(doc, "|", `\|`)
}
