// Command configdoc writes the configuration table of docs/configuration.md
// from the settings table of package config (shared/config/settings.go),
// between the config-table markers. `make config-doc` runs it; with -check it
// only reports whether the table is up to date (exit 1 when not).
//
//	go run ./config/cmd/configdoc -doc ../docs/configuration.md   (from shared/)
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ellipsis-chat/ellipsis/shared/config"
)

func main() {
	path := flag.String("doc", "docs/configuration.md", "the Markdown file holding the table, updated in place")
	check := flag.Bool("check", false, "only check: exit 1 when the file's table differs")
	flag.Parse()
	old, err := os.ReadFile(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(2)
	}
	updated, err := config.UpdateTable(string(old))
	if err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", *path+":", err)
		os.Exit(2)
	}
	if updated == string(old) {
		return
	}
	if *check {
		fmt.Fprintln(os.Stderr, "configdoc:", *path, "configuration table is out of date: run make config-doc")
		os.Exit(1)
	}
	if err := os.WriteFile(*path, []byte(updated), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(2)
	}
	fmt.Println("configdoc: wrote", *path)
}
