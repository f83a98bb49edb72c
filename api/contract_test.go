package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
)

// distinctive are names no other string in sluice equals: written as a
// literal anywhere but here, they are a second spelling of the contract.
func distinctive() []string {
	return append([]string{
		api.RolloutWorkflow, api.WaveWorkflow, api.DefaultTaskQueue, api.WaveTaskQueue,
		api.SignalTargetDeleted, api.SignalWaveMember,
	}, api.Activities()...)
}

// nameArgs says, for each Temporal call that takes a workflow, signal,
// query or update name, which argument holds it (the SDK's client, the
// workflow package and the test environment).
var nameArgs = map[string][]int{
	// The client's form (ctx, id, run, name, …), and the test
	// environment's (name, …), whose first argument is the name.
	"SignalWorkflow":              {3, 0},
	"SignalWithStartWorkflow":     {2},
	"QueryWorkflow":               {3, 0},
	"SignalExternalWorkflow":      {3},
	"GetSignalChannel":            {1},
	"SetQueryHandler":             {1},
	"SetUpdateHandler":            {1},
	"SetUpdateHandlerWithOptions": {1},
	"NewContinueAsNewError":       {1},
	"UpdateWorkflow":              {0},
}

// TestNamesAreSpeltOnlyHere fails when a workflow, task queue, signal,
// query, update or activity name is written as a string literal outside
// this package: each has one spelling, the constant here.
func TestNamesAreSpeltOnlyHere(t *testing.T) {
	names := map[string]bool{}
	for _, n := range distinctive() {
		names[n] = true
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "api" || rel == "testdata" || strings.HasSuffix(rel, "/testdata") || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, rel, src, 0)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if s, ok := literal(n); ok && names[s] {
					t.Errorf("%s: %q is a name of sluice's contract: use the constant in package api", fset.Position(n.Pos()), s)
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				for _, i := range nameArgs[sel.Sel.Name] {
					if i >= len(n.Args) {
						continue
					}
					if lit, ok := n.Args[i].(*ast.BasicLit); ok {
						if s, ok := literal(lit); ok {
							t.Errorf("%s: %s names %q with a literal: use the constant in package api", fset.Position(lit.Pos()), sel.Sel.Name, s)
						}
					}
				}
			case *ast.KeyValueExpr:
				key, ok := n.Key.(*ast.Ident)
				if !ok || (key.Name != "UpdateName" && key.Name != "WorkflowType") {
					return true
				}
				if lit, ok := n.Value.(*ast.BasicLit); ok {
					t.Errorf("%s: %s is the literal %s: use the constant in package api", fset.Position(lit.Pos()), key.Name, lit.Value)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files under %s: the walk did not see the repository", files, root)
	}
}

func literal(l *ast.BasicLit) (string, bool) {
	if l.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(l.Value)
	return s, err == nil
}
