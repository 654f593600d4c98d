package cmd

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// fuzzLine is a line of the Makefile's fuzz target that runs one fuzz
// target: -fuzz='^Name$$' ... ./pkg.
var fuzzLine = regexp.MustCompile(`-fuzz='\^(\w+)\$\$'.*\s(\./[\w/.-]+)\s*$`)

// TestMakeFuzzRunsEveryTarget: `make fuzz` runs every fuzz target in the
// module, and names none that is gone. A target it does not run only
// ever runs its seeds (go test runs them as tests), so a new one left
// out of the Makefile would look fuzzed and not be. Only the fuzz
// target's lines that pass -fuzz= count; its other lines are not
// about Go fuzz targets.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	root := ".."
	listed, err := makeFuzzTargets(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	found, err := fuzzFuncs(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("no fuzz target found in the module: the walk is broken")
	}
	for _, f := range found {
		if !slices.Contains(listed, f) {
			t.Errorf("%s is not run by `make fuzz`: add `$(GO) test -run='^$$' -fuzz='^%s$$' -fuzztime=$(FUZZTIME) %s` to the Makefile's fuzz target",
				f, strings.Fields(f)[1], strings.Fields(f)[0])
		}
	}
	for _, l := range listed {
		if !slices.Contains(found, l) {
			t.Errorf("`make fuzz` runs %s, which is not a fuzz target in that package (any more)", l)
		}
	}
}

// makeFuzzTargets returns "./pkg FuzzName" for each -fuzz= line of the
// Makefile's fuzz target.
func makeFuzzTargets(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "fuzz:"):
			in = true
		case in && !strings.HasPrefix(line, "\t"):
			in = false
		case in && strings.Contains(line, "-fuzz="):
			m := fuzzLine.FindStringSubmatch(line)
			if m == nil {
				return nil, &fs.PathError{Op: "reading the fuzz target", Path: path, Err: errBadFuzzLine(line)}
			}
			out = append(out, strings.TrimSuffix(m[2], "/")+" "+m[1])
		}
	}
	return out, nil
}

type errBadFuzzLine string

func (e errBadFuzzLine) Error() string {
	return "a -fuzz= line not of the form -fuzz='^Name$$' ... ./pkg: " + string(e)
}

// fuzzFuncs returns "./pkg FuzzName" for each fuzz target (a top-level
// func Fuzz…(*testing.F)) in the module's test files.
func fuzzFuncs(root string) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Fuzz") && takesF(fn) {
				out = append(out, "./"+filepath.ToSlash(rel)+" "+fn.Name.Name)
			}
		}
		return nil
	})
	return out, err
}

// takesF reports whether fn's one parameter is a *testing.F.
func takesF(fn *ast.FuncDecl) bool {
	ps := fn.Type.Params.List
	if len(ps) != 1 {
		return false
	}
	star, ok := ps[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "F"
}
