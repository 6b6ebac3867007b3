// Command ellipsis-plots draws the README's latency-against-load plots
// (SVG) from the load generator's summaries (`make plots`; thin main over
// tools/loadplot):
//
//	go run ./tools/cmd/ellipsis-plots                         # docs/data/loadgen-sweep -> docs/img
//	go run ./tools/cmd/ellipsis-plots -data bin/sweep -out /tmp
//
// It reads <data>/rate-*.json (latency against offered state changes per
// second) and <data>/conns-*.json (latency against connections), as
// tools/loadgen/sweep.sh writes them, and writes
// <out>/latency-vs-rate.svg and <out>/latency-vs-connections.svg.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
	"github.com/ellipsis-chat/ellipsis/tools/loadplot"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the command; it returns the exit code: 0 done, 1 failed, 2 bad
// usage.
func run(args []string, stdout, stderr io.Writer) int {
	if buildinfo.HandleFlag("ellipsis-plots", args, stdout) {
		return 0
	}
	fs := flag.NewFlagSet("ellipsis-plots", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "docs/data/loadgen-sweep", "directory of the sweep's summaries (rate-*.json, conns-*.json)")
	out := fs.String("out", "docs/img", "directory to write latency-vs-rate.svg and latency-vs-connections.svg into")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ellipsis-plots: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	plots := loadplot.Standard(*data, *out)
	if err := loadplot.Draw(plots); err != nil {
		fmt.Fprintln(stderr, "ellipsis-plots:", err)
		return 1
	}
	for _, p := range plots {
		fmt.Fprintln(stderr, "wrote", p.Out)
	}
	return 0
}
