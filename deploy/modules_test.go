package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// readModFile parses dir/go.mod (dir relative to the repository root).
func readModFile(t testing.TB, root, dir string) *modfile.File {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(p, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// neededModules lists the module directories (slash-separated, relative to
// the repository root) that building the module in dir needs: dir itself and,
// transitively, every local directory its go.mod replaces a module with.
// That is what `GOWORK=off go build` in dir reads, so it is what an image
// built that way must contain.
func neededModules(t testing.TB, root, dir string) []string {
	t.Helper()
	seen := map[string]bool{}
	var walk func(dir string)
	walk = func(dir string) {
		if seen[dir] {
			return
		}
		seen[dir] = true
		for _, r := range readModFile(t, root, dir).Replace {
			if !modfile.IsDirectoryPath(r.New.Path) {
				continue // a replacement by another module version
			}
			target := path.Clean(path.Join(dir, filepath.ToSlash(r.New.Path)))
			if target == ".." || strings.HasPrefix(target, "../") || path.IsAbs(target) {
				t.Fatalf("%s/go.mod replaces %s with %s, outside the repository", dir, r.Old.Path, r.New.Path)
			}
			walk(target)
		}
	}
	walk(dir)
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func TestNeededModules(t *testing.T) {
	root := repoRoot(t)
	// The facts the Dockerfiles were written from; if a service gains a
	// local dependency, its Dockerfile must copy it (TestDockerfiles says
	// which line is missing) and this list changes with it.
	for svc, want := range map[string][]string{
		gateway.dir: {"clients/js", "services/gateway", "shared", "testkit"},
		worker.dir:  {"services/presence-worker", "shared", "testkit"},
	} {
		got := neededModules(t, root, svc)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Logf("%s needs the modules %v (was %v): check its Dockerfile", svc, got, want)
		}
		if got[0] == "" || !contains(got, svc) || !contains(got, "shared") {
			t.Errorf("%s: needed modules %v miss the service or shared", svc, got)
		}
	}
}

// A route the services register on an http.ServeMux: "GET /healthz".
type route struct{ method, path string }

// sourceRoutes lists the ServeMux patterns registered with a string literal
// (mux.Handle("GET /readyz", ...), mux.HandleFunc(...)) in the non-test Go
// files of the modules a service is built from.
func sourceRoutes(t testing.TB, root string, svc service) []route {
	t.Helper()
	var out []route
	fset := token.NewFileSet()
	for _, mod := range neededModules(t, root, svc.dir) {
		base := filepath.Join(root, filepath.FromSlash(mod))
		err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if n := d.Name(); p != base && (n == "testdata" || n == "node_modules" || strings.HasPrefix(n, ".")) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Logf("%s: %v (skipped)", p, err) // work in progress elsewhere; not this check's business
				return nil
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) < 2 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
					return true
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				pattern, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				r := route{method: "", path: pattern}
				if m, p, ok := strings.Cut(pattern, " "); ok {
					r = route{method: m, path: strings.TrimSpace(p)}
				}
				if i := strings.Index(r.path, "/"); i > 0 { // "host/path"
					r.path = r.path[i:]
				}
				out = append(out, r)
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// serves reports whether a GET of path matches one of routes exactly (the
// probes and the metrics scrape use fixed paths).
func serves(routes []route, p string) bool {
	for _, r := range routes {
		if r.path == p && (r.method == "" || r.method == "GET") {
			return true
		}
	}
	return false
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
