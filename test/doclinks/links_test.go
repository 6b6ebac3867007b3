// Package doclinks checks the repository's Markdown: every relative link
// ([text](path), [text](path#anchor), [text](#anchor)) names a file or
// folder that exists, and every anchor names a heading of its target file
// as GitHub renders it. Links inside fenced code blocks and inline code
// spans are not links; absolute URLs (https:, mailto:, ...) are not
// checked (that needs the network).
package doclinks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// skipDirs are folders whose Markdown is not the project's own: installed
// packages, build output, git's store.
var skipDirs = map[string]bool{".git": true, "node_modules": true, "bin": true}

// linkRE matches an inline link's target: ](target) or ](target "title").
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// headingRE matches an ATX heading line: 1 to 6 '#', a space, the text.
var headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// codeSpanRE matches an inline code span of one to three backticks.
var codeSpanRE = regexp.MustCompile("(`{1,3})[^`]*?`{1,3}")

// mdLinkTextRE matches a link inside a heading, whose text is what counts.
var mdLinkTextRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(wd)) // test/doclinks -> repository root
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("repository root not found above %s: %v", wd, err)
	}
	return root
}

// proseLines returns the lines of a Markdown file outside fenced code
// blocks (``` or ~~~), each with its 1-based line number.
func proseLines(text string) (lines []string, numbers []int) {
	fence := ""
	for i, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(l, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		lines = append(lines, l)
		numbers = append(numbers, i+1)
	}
	return lines, numbers
}

// slug is GitHub's anchor for a heading's text: lower case, every
// character but letters, digits, spaces, '-' and '_' dropped, spaces as
// '-'. Inline code keeps its text; a link keeps its text.
func slug(heading string) string {
	heading = mdLinkTextRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings, a repeated
// heading's later ones numbered as GitHub numbers them (-1, -2, ...).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines, _ := proseLines(text)
	for _, l := range lines {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// markdownFiles lists the repository's Markdown files, relative to root.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDirs[d.Name()] {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestMarkdownLinks fails on every relative link of the repository's
// Markdown whose file is missing or whose anchor is no heading of it.
func TestMarkdownLinks(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	if len(files) < 10 {
		t.Fatalf("found only %d Markdown files under %s; is it the repository?", len(files), root)
	}
	texts := map[string]string{}
	read := func(rel string) string {
		if s, ok := texts[rel]; ok {
			return s
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		texts[rel] = string(b)
		return texts[rel]
	}
	checked := 0
	for _, file := range files {
		lines, numbers := proseLines(read(file))
		for i, l := range lines {
			l = codeSpanRE.ReplaceAllString(l, "")
			for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, ":") && !strings.HasPrefix(target, "#") {
					continue // a URL (https:, mailto:, ...)
				}
				checked++
				path, anchor, _ := strings.Cut(target, "#")
				rel := file
				if path != "" {
					rel = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
						t.Errorf("%s:%d: link to %s: no such file", file, numbers[i], target)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(rel, ".md") && !anchors(read(rel))[anchor] {
					t.Errorf("%s:%d: link to %s: %s has no heading with anchor #%s", file, numbers[i], target, rel, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d links; is the link pattern still right?", checked)
	}
}

// TestSlug pins the anchor rule on headings of the kind the docs use.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Configuration names":                                "configuration-names",
		"Redis Cluster: classic PUBLISH vs sharded Pub/Sub":  "redis-cluster-classic-publish-vs-sharded-pubsub",
		"What `make test` needs, and what it sets up itself": "what-make-test-needs-and-what-it-sets-up-itself",
		"Store `keys` (seed pattern 1)":                      "store-keys-seed-pattern-1",
		"Against Centrifugo (peer benchmark)":                "against-centrifugo-peer-benchmark",
		"Room events on NATS (`ELLIPSIS_NATS_EVENTS`)":       "room-events-on-nats-ellipsis_nats_events",
		"Idle connections: 22.6 → 11.5 KiB":                  "idle-connections-226--115-kib",
		"See [protocol.md](protocol.md)":                     "see-protocolmd",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
	a := anchors("# Top\n\n## Limits\n\n```\n## not a heading\n```\n\n## Limits\n")
	for _, want := range []string{"top", "limits", "limits-1"} {
		if !a[want] {
			t.Errorf("anchors: no %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Errorf("anchors: a heading inside a code block counted: %v", a)
	}
}
