package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"golang.org/x/mod/modfile"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line  int
	cmd   string   // upper case: FROM, COPY, RUN, ...
	flags []string // --from=build, ...
	args  []string // shell words, or the JSON array's elements
	raw   string   // everything after the command
}

// parseDockerfile reads the instructions of a Dockerfile: enough of the
// syntax for the checks below (comments, line continuations, --flags, JSON
// arrays), not a builder.
func parseDockerfile(t testing.TB, p string) []instruction {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		text := cur.String()
		cur.Reset()
		cmd, rest, _ := strings.Cut(text, " ")
		in := instruction{line: start, cmd: strings.ToUpper(cmd), raw: strings.TrimSpace(rest)}
		words := strings.Fields(in.raw)
		for len(words) > 0 && strings.HasPrefix(words[0], "--") {
			in.flags = append(in.flags, words[0])
			words = words[1:]
		}
		if body := strings.TrimSpace(strings.Join(words, " ")); strings.HasPrefix(body, "[") {
			if err := json.Unmarshal([]byte(body), &in.args); err != nil {
				t.Fatalf("%s:%d: %s: %v", p, start, in.cmd, err)
			}
		} else {
			in.args = words
		}
		out = append(out, in)
	}
	if cur.Len() > 0 {
		t.Fatalf("%s: ends inside a continued line", p)
	}
	return out
}

func (in instruction) flag(name string) (string, bool) {
	for _, f := range in.flags {
		if k, v, _ := strings.Cut(strings.TrimPrefix(f, "--"), "="); k == name {
			return v, true
		}
	}
	return "", false
}

// stage is one FROM ... of a multi-stage Dockerfile.
type stage struct {
	name, image string
	body        []instruction
}

func stages(t testing.TB, p string, ins []instruction) []stage {
	t.Helper()
	var out []stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			s := stage{image: in.args[0]}
			if len(in.args) == 3 && strings.EqualFold(in.args[1], "AS") {
				s.name = in.args[2]
			}
			out = append(out, s)
			continue
		}
		if len(out) == 0 {
			if in.cmd == "ARG" {
				continue
			}
			t.Fatalf("%s:%d: %s before FROM", p, in.line, in.cmd)
		}
		out[len(out)-1].body = append(out[len(out)-1].body, in)
	}
	return out
}

// envOf collects a stage's ENV key=value pairs.
func envOf(s stage) map[string]string {
	env := map[string]string{}
	for _, in := range s.body {
		if in.cmd != "ENV" {
			continue
		}
		if len(in.args) == 2 && !strings.Contains(in.args[0], "=") { // legacy "ENV key value"
			env[in.args[0]] = in.args[1]
			continue
		}
		for _, kv := range in.args {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = strings.Trim(v, `"`)
		}
	}
	return env
}

var goVersionRE = regexp.MustCompile(`^(?:docker\.io/)?(?:library/)?golang:(\d+)\.(\d+)`)

// Each Dockerfile builds its service from the repository root, copying the
// modules it needs (its go.mod's replace directives) and nothing else:
// module files first, download, then source; static, trimmed, stripped; a
// distroless nonroot runtime with GOTRACEBACK=single.
func TestDockerfiles(t *testing.T) {
	root := repoRoot(t)
	for _, svc := range services {
		t.Run(svc.name, func(t *testing.T) {
			p := filepath.Join(root, svc.dir, "Dockerfile")
			ins := parseDockerfile(t, p)
			st := stages(t, p, ins)
			if len(st) < 2 {
				t.Fatalf("%s: want a build stage and a runtime stage, got %d stages", p, len(st))
			}
			build, final := st[0], st[len(st)-1]
			needed := neededModules(t, root, svc.dir)

			checkBuilderGo(t, root, p, build, needed)
			env := envOf(build)
			scan := scanBuildStage(t, p, svc, build, needed)
			checkModuleCopies(t, root, p, svc, needed, scan)
			checkGoBuild(t, p, svc, env, scan)
			checkRuntimeStage(t, p, svc, build, final)
		})
	}
}

// checkBuilderGo checks that the builder's Go is at least every needed
// module's go line.
func checkBuilderGo(t *testing.T, root, p string, build stage, needed []string) {
	t.Helper()
	m := goVersionRE.FindStringSubmatch(build.image)
	if m == nil {
		t.Fatalf("%s: build stage FROM %s: want an official golang:X.Y image", p, build.image)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	for _, mod := range needed {
		mf := readModFile(t, root, mod)
		if mf.Go == nil {
			continue
		}
		parts := strings.SplitN(mf.Go.Version, ".", 3)
		wantMajor, _ := strconv.Atoi(parts[0])
		wantMinor, _ := strconv.Atoi(parts[1])
		if major < wantMajor || (major == wantMajor && minor < wantMinor) {
			t.Errorf("%s: builder %s is older than %s/go.mod's go %s", p, build.image, mod, mf.Go.Version)
		}
	}
}

// buildScan is what the build stage does, in instruction indexes: where
// `go mod download` runs, where each needed module's go.mod/go.sum and tree
// are copied, and the RUN with `go build` and the directory it runs in.
type buildScan struct {
	downloaded  int // index of the RUN with `go mod download`, -1 if none
	copiedFiles map[string]int
	copiedDirs  map[string]int
	buildRun    *instruction
	buildDir    string
}

// scanBuildStage walks the build stage, reporting ADD and any COPY that is
// not a needed module or does not land at its replace path.
func scanBuildStage(t *testing.T, p string, svc service, build stage, needed []string) buildScan {
	t.Helper()
	workdir := "/"
	sc := buildScan{downloaded: -1, copiedFiles: map[string]int{}, copiedDirs: map[string]int{}}
	for i, in := range build.body {
		switch in.cmd {
		case "WORKDIR":
			workdir = path.Join(workdir, in.args[0])
		case "COPY", "ADD":
			if in.cmd == "ADD" {
				t.Errorf("%s:%d: ADD; use COPY", p, in.line)
			}
			if _, ok := in.flag("from"); ok {
				continue
			}
			scanCopy(t, p, svc, in, i, needed, &sc)
		case "RUN":
			cmd := strings.Join(in.args, " ")
			dir := workdir
			if c, ok := strings.CutPrefix(cmd, "cd "); ok {
				d, _, _ := strings.Cut(c, " ")
				dir = path.Join(workdir, d)
			}
			if strings.Contains(cmd, "go mod download") && sc.downloaded < 0 {
				sc.downloaded = i
			}
			if strings.Contains(cmd, "go build") {
				in := in
				sc.buildRun, sc.buildDir = &in, dir
			}
		}
	}
	return sc
}

// scanCopy records the build stage's COPY at index i in sc.
func scanCopy(t *testing.T, p string, svc service, in instruction, i int, needed []string, sc *buildScan) {
	t.Helper()
	srcs, dest := in.args[:len(in.args)-1], in.args[len(in.args)-1]
	for _, src := range srcs {
		clean := path.Clean(src)
		mod := ""
		for _, n := range needed {
			if clean == n || strings.HasPrefix(clean, n+"/") {
				mod = n
			}
		}
		if mod == "" {
			t.Errorf("%s:%d: COPY %s: not part of a module %s needs (%v)", p, in.line, src, svc.name, needed)
			continue
		}
		if clean == mod {
			// The tree lands where the replace paths expect it:
			// the same path under the work dir.
			if path.Clean(dest) != mod {
				t.Errorf("%s:%d: COPY %s %s: the module must land at %s/ for the replace paths to resolve", p, in.line, src, dest, mod)
			}
			sc.copiedDirs[mod] = i
			continue
		}
		if path.Clean(dest) != path.Dir(clean) {
			t.Errorf("%s:%d: COPY %s %s: must land in %s/", p, in.line, src, dest, path.Dir(clean))
		}
		for _, f := range []string{"go.mod", "go.sum"} {
			if ok, _ := path.Match(clean, mod+"/"+f); ok {
				sc.copiedFiles[mod+"/"+f] = i
			}
		}
	}
}

// checkModuleCopies checks the layer order: every needed module's go.mod
// (and go.sum) before `go mod download`, its tree after.
func checkModuleCopies(t *testing.T, root, p string, svc service, needed []string, sc buildScan) {
	t.Helper()
	if sc.downloaded < 0 {
		t.Errorf("%s: no RUN go mod download before the source is copied", p)
	}
	for _, mod := range needed {
		files := []string{mod + "/go.mod"}
		if _, err := os.Stat(filepath.Join(root, mod, "go.sum")); err == nil {
			files = append(files, mod+"/go.sum")
		}
		for _, f := range files {
			if i, ok := sc.copiedFiles[f]; !ok || i > sc.downloaded {
				t.Errorf("%s: %s is not copied before `go mod download`", p, f)
			}
		}
		if i, ok := sc.copiedDirs[mod]; !ok {
			t.Errorf("%s: the module %s (needed by %s/go.mod's replace directives) is never copied: add COPY %s/ %s/", p, mod, svc.dir, mod, mod)
		} else if i < sc.downloaded {
			t.Errorf("%s: %s/ is copied before `go mod download`: every source change would download again", p, mod)
		}
	}
}

// checkGoBuild checks the `go build` RUN: static, trimmed, stripped, stamped
// with the version, in the service's module, outside the workspace.
func checkGoBuild(t *testing.T, p string, svc service, env map[string]string, sc buildScan) {
	t.Helper()
	if sc.buildRun == nil {
		t.Fatalf("%s: no RUN go build", p)
	}
	b := strings.Join(sc.buildRun.args, " ")
	for _, want := range []string{"-trimpath", `-ldflags="-s -w -X github.com/ellipsis-chat/ellipsis/shared/buildinfo.version=${VERSION} -X github.com/ellipsis-chat/ellipsis/shared/buildinfo.revision=${REVISION}"`, "GOOS=${TARGETOS} GOARCH=${TARGETARCH}", "./cmd/" + svc.name} {
		if !strings.Contains(b, want) {
			t.Errorf("%s:%d: go build lacks %s", p, sc.buildRun.line, want)
		}
	}
	if !strings.HasSuffix(sc.buildDir, "/"+svc.dir) {
		t.Errorf("%s:%d: go build runs in %s, not in the service's module %s", p, sc.buildRun.line, sc.buildDir, svc.dir)
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "GOWORK": "off"} {
		if env[k] != v && !strings.Contains(b, k+"="+v) {
			t.Errorf("%s: the build does not set %s=%s", p, k, v)
		}
	}
}

// checkRuntimeStage checks the runtime stage: distroless static nonroot,
// GOTRACEBACK=single, only the binary copied from the build stage, no RUN,
// and an ENTRYPOINT that runs the service.
func checkRuntimeStage(t *testing.T, p string, svc service, build, final stage) {
	t.Helper()
	if !strings.HasPrefix(final.image, "gcr.io/distroless/static") || !strings.HasSuffix(final.image, ":nonroot") {
		t.Errorf("%s: runtime FROM %s, want gcr.io/distroless/static...:nonroot", p, final.image)
	}
	if envOf(final)["GOTRACEBACK"] != "single" {
		t.Errorf("%s: runtime stage does not set GOTRACEBACK=single", p)
	}
	var user, entry string
	labels := map[string]string{}
	args := map[string]bool{}
	for _, in := range final.body {
		switch in.cmd {
		case "ARG":
			name, _, _ := strings.Cut(in.args[0], "=")
			args[name] = true
		case "LABEL":
			for _, kv := range in.args {
				k, v, _ := strings.Cut(kv, "=")
				labels[k] = strings.Trim(v, `"`)
			}
		case "USER":
			user = in.args[0]
		case "ENTRYPOINT":
			entry = strings.Join(in.args, " ")
		case "COPY":
			if from, ok := in.flag("from"); !ok || from != build.name {
				t.Errorf("%s:%d: the runtime stage copies from the context; only the binary from the build stage", p, in.line)
			}
		case "RUN":
			t.Errorf("%s:%d: RUN in the runtime stage (distroless has no shell)", p, in.line)
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u != "nonroot" && u != "65532" {
		t.Errorf("%s: runtime USER %q, want nonroot (65532)", p, user)
	}
	if !strings.HasSuffix(entry, "/"+svc.name) {
		t.Errorf("%s: ENTRYPOINT %q does not run %s", p, entry, svc.name)
	}
	checkOCILabels(t, p, labels, args)
}

// checkOCILabels checks the runtime stage's OCI labels: the source and
// licence fixed, the version and revision from the build args, which the
// runtime stage must declare again (an ARG ends with its stage).
func checkOCILabels(t *testing.T, p string, labels map[string]string, args map[string]bool) {
	t.Helper()
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/ellipsis-chat/ellipsis",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  "${VERSION}",
		"org.opencontainers.image.revision": "${REVISION}",
	} {
		if labels[k] != want {
			t.Errorf("%s: runtime LABEL %s=%q, want %q", p, k, labels[k], want)
		}
	}
	for _, a := range []string{"VERSION", "REVISION"} {
		if !args[a] {
			t.Errorf("%s: the runtime stage has no ARG %s, so its label is empty", p, a)
		}
	}
}

// The check above must notice a Dockerfile that forgets a needed module.
func TestDockerfileCheckCatchesAMissingModule(t *testing.T) {
	root := repoRoot(t)
	p := filepath.Join(root, gateway.dir, "Dockerfile")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.ReplaceAll(string(data), "COPY clients/js/ clients/js/\n", "")
	if broken == string(data) {
		t.Fatal("the gateway Dockerfile has no `COPY clients/js/ clients/js/` line to remove")
	}
	tmp := filepath.Join(t.TempDir(), "Dockerfile")
	if err := os.WriteFile(tmp, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	copied := map[string]bool{}
	for _, in := range parseDockerfile(t, tmp) {
		if in.cmd == "COPY" {
			if _, ok := in.flag("from"); !ok {
				copied[path.Clean(in.args[0])] = true
			}
		}
	}
	var missing []string
	for _, mod := range neededModules(t, root, gateway.dir) {
		if !copied[mod] {
			missing = append(missing, mod)
		}
	}
	if fmt.Sprint(missing) != "[clients/js]" {
		t.Errorf("without its COPY line, missing modules are %v, want [clients/js]", missing)
	}
}

// .dockerignore keeps out what no image needs and nothing that one needs.
func TestDockerignore(t *testing.T) {
	root := repoRoot(t)
	excluded := dockerignoreMatcher(t, root)
	needed := map[string]bool{}
	for _, svc := range services {
		for _, mod := range neededModules(t, root, svc.dir) {
			needed[mod] = true
		}
	}
	for mod := range needed {
		checkModuleContext(t, root, mod, excluded)
	}
	checkUnneededModulesExcluded(t, root, needed, excluded)
	for _, p := range []string{".git/HEAD", "skaffold.yaml", "deploy/k8s/base/kustomization.yaml", "docs/deploy.md"} {
		if !excluded(p) {
			t.Errorf(".dockerignore does not exclude %s", p)
		}
	}
}

// dockerignoreMatcher reads the repository's .dockerignore and returns
// whether a slash-separated path relative to root is left out of the build
// context.
func dockerignoreMatcher(t *testing.T, root string) func(rel string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return func(rel string) bool {
		ok, err := pm.MatchesOrParentMatches(rel)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
}

// checkModuleContext walks a module an image needs: its tests stay out of
// the build context, everything else goes in.
func checkModuleContext(t *testing.T, root, mod string, excluded func(string) bool) {
	t.Helper()
	base := filepath.Join(root, filepath.FromSlash(mod))
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			// Dependencies, test data and test output (git-ignored) are
			// meant to stay out of images.
			if d.Name() == "node_modules" || d.Name() == "testdata" || d.Name() == "test-artifacts" || d.Name() == ".git" {
				return filepath.SkipDir
			}
			// A directory with a go.mod of its own is another module
			// (testkit/inproc inside testkit), not part of this one.
			if p != base {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(rel, "_test.go") {
			if !excluded(rel) {
				t.Errorf(".dockerignore sends %s to the builder; tests are not part of an image", rel)
			}
			return nil
		}
		if excluded(rel) {
			t.Errorf(".dockerignore excludes %s, which the image of a module that needs %s copies", rel, mod)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkUnneededModulesExcluded checks that workspace modules no image needs
// stay out of the build context.
func checkUnneededModulesExcluded(t *testing.T, root string, needed map[string]bool, excluded func(string) bool) {
	t.Helper()
	work := filepath.Join(root, "go.work")
	data, err := os.ReadFile(work)
	if err != nil {
		t.Fatal(err)
	}
	wf, err := modfile.ParseWork(work, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range wf.Use {
		mod := path.Clean(filepath.ToSlash(u.Path))
		if !needed[mod] && !excluded(mod+"/go.mod") {
			t.Errorf(".dockerignore sends the module %s, which no image needs, to every build", mod)
		}
	}
}
