package config

//go:generate go run ./cmd/configdoc -doc ../../docs/configuration.md

import (
	"errors"
	"fmt"
	"strings"
)

// Markers in docs/configuration.md: the configuration table between them is
// written by [UpdateTable] (`make config-doc`), never by hand.
const (
	TableBegin = "<!-- config-table:begin (make config-doc writes this table from shared/config/settings.go) -->"
	TableEnd   = "<!-- config-table:end -->"
)

// MarkdownTable renders the settings table as docs/configuration.md's
// Markdown table:
// variable, default (and the dev stack's), which services read it, what it
// accepts and what it means, one row per setting in the table's order.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| variable | default | read by | accepts | meaning |\n|---|---|---|---|---|\n")
	for _, s := range Settings() {
		def := s.DefaultDoc
		if def == "" {
			def = "empty"
			if v := s.V.String(); v != "" {
				def = "`" + v + "`"
			}
		}
		if s.Dev != "" {
			def += " (dev stack: `" + s.Dev + "`)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", s.Env, cell(def), s.For, cell(s.Valid()), cell(s.Doc))
	}
	return b.String()
}

// cell keeps a table cell on one row: '|' not already escaped is escaped.
func cell(s string) string {
	s = strings.ReplaceAll(s, `\|`, "|")
	return strings.ReplaceAll(s, "|", `\|`)
}

// UpdateTable returns doc (the text of docs/configuration.md) with the text
// between [TableBegin] and [TableEnd] replaced by [MarkdownTable]; an error
// when the markers are missing or out of order.
func UpdateTable(doc string) (string, error) {
	i := strings.Index(doc, TableBegin)
	j := strings.Index(doc, TableEnd)
	if i < 0 || j < i {
		return "", errors.New("config: no " + TableBegin + " ... " + TableEnd + " markers in that order")
	}
	return doc[:i+len(TableBegin)] + "\n" + MarkdownTable() + doc[j:], nil
}
