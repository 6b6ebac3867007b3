package release

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ellipsis-chat/ellipsis/tools/release/internal/gobuild"
	"github.com/ellipsis-chat/ellipsis/tools/release/internal/image"
)

// dockerInstr is one Dockerfile instruction, continuation lines joined.
type dockerInstr struct{ cmd, rest string }

// readDockerfile returns the instructions of a Dockerfile (comments and
// line continuations handled; enough for the checks below, not a parser).
func readDockerfile(t *testing.T, path string) []dockerInstr {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []dockerInstr
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "#") || (l == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
			continue
		}
		cur.WriteString(l)
		cmd, rest, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstr{strings.ToUpper(cmd), strings.TrimSpace(rest)})
		cur.Reset()
	}
	return out
}

// The images this tool assembles are the Dockerfiles' images: the same
// build command (module, package, flags, stamped version and revision),
// binary path, user, environment, ports, entry point and labels. If a
// Dockerfile changes, this fails until the tool follows.
func TestImagesMatchDockerfiles(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Every service with a Dockerfile is released.
	dockerfiles, _ := filepath.Glob(filepath.Join(root, "services/*/Dockerfile"))
	var dirs []string
	for _, s := range Services() {
		dirs = append(dirs, s.ModuleDir)
	}
	for _, d := range dockerfiles {
		rel, _ := filepath.Rel(root, filepath.Dir(d))
		if !slices.Contains(dirs, filepath.ToSlash(rel)) {
			t.Errorf("%s has a Dockerfile but is not in Services()", rel)
		}
	}
	c := Config{Version: "${VERSION}", Revision: "${REVISION}"}
	for _, s := range Services() {
		p := filepath.Join(root, s.ModuleDir, "Dockerfile")
		ins := readDockerfile(t, p)
		last := 0
		for i, in := range ins {
			if in.cmd == "FROM" {
				last = i
			}
		}
		// The build stage's go build: the same as gobuild's, flags and all.
		var build string
		for _, in := range ins[:last] {
			if in.cmd == "RUN" && strings.Contains(in.rest, "go build") {
				build = in.rest
			}
		}
		for _, want := range []string{"cd " + s.ModuleDir + " ", "-trimpath", `-ldflags="` + gobuild.LDFlags("${VERSION}", "${REVISION}") + `"`, " " + s.Package} {
			if !strings.Contains(build, want) {
				t.Errorf("%s: go build %q lacks %q, which tools/release passes", p, build, want)
			}
		}
		// The runtime stage.
		var ports []string
		labels := map[string]string{}
		env := map[string]string{}
		var user, entry, copyTo string
		for _, in := range ins[last+1:] {
			switch in.cmd {
			case "EXPOSE":
				for _, f := range strings.Fields(in.rest) {
					if !strings.Contains(f, "/") {
						f += "/tcp"
					}
					ports = append(ports, f)
				}
			case "LABEL", "ENV":
				for _, kv := range strings.Fields(in.rest) {
					k, v, _ := strings.Cut(kv, "=")
					if in.cmd == "LABEL" {
						labels[k] = strings.Trim(v, `"`)
					} else {
						env[k] = strings.Trim(v, `"`)
					}
				}
			case "USER":
				user = in.rest
			case "ENTRYPOINT":
				entry = in.rest
			case "COPY":
				f := strings.Fields(in.rest)
				copyTo = f[len(f)-1]
			}
		}
		bin := image.BinDir + "/" + s.Name
		if copyTo != bin || entry != `["`+bin+`"]` {
			t.Errorf("%s: binary copied to %s, entry point %s; tools/release puts it at %s", p, copyTo, entry, bin)
		}
		if user != "65532:65532" || image.NonrootUID != 65532 {
			t.Errorf("%s: USER %s; tools/release runs as %d:%d", p, user, image.NonrootUID, image.NonrootUID)
		}
		if env["GOTRACEBACK"] != "single" {
			t.Errorf("%s: GOTRACEBACK=%q; tools/release sets single", p, env["GOTRACEBACK"])
		}
		slices.Sort(ports)
		if !slices.Equal(ports, s.Ports) {
			t.Errorf("%s: EXPOSE %v; tools/release exposes %v", p, ports, s.Ports)
		}
		// Every label the Dockerfile sets, the tool sets alike (the tool
		// adds created, url and description, which a Dockerfile build
		// cannot know or leaves to the builder).
		tool := c.Labels(s)
		for _, k := range []string{"org.opencontainers.image.source", "org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.licenses"} {
			if _, ok := labels[k]; !ok {
				t.Errorf("%s: no LABEL %s", p, k)
			}
		}
		for k, v := range labels {
			if tool[k] != v {
				t.Errorf("%s: LABEL %s=%q; tools/release writes %q", p, k, v, tool[k])
			}
		}
	}
}
