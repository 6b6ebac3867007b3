// Command ellipsis-loadgen opens many WebSocket connections over many rooms
// against one or more Ellipsis gateways, drives typing on them at a fixed
// rate of state changes or by replaying real keystroke timings through the
// SDK's timer rules, and measures the end-to-end latency of every typing
// event from the sender's write to each receiver's read. It prints a
// progress line every second and a summary table at the end, and can write
// the summary as JSON. A thin main over package loadgen.
//
//	ellipsis-loadgen -stack -mode rate -conns 1000 -rooms 100 -rate 2000 -duration 20s
//	ellipsis-loadgen -url ws://127.0.0.1:8080/v1/ws -mode replay -conns 1000 -duration 60s
//	ellipsis-loadgen -url ws://127.0.0.1:8080/v1/ws -mode idle -conns 10000 -rss-pid $(pgrep -n gateway)
//
// Targets must be loopback addresses unless -allow-remote is given. Every
// run is bounded (connections, -duration, -settle-max) and stops by itself.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
	"github.com/ellipsis-chat/ellipsis/shared/logging"
	"github.com/ellipsis-chat/ellipsis/tools/keystrokes"
	"github.com/ellipsis-chat/ellipsis/tools/loadgen"
)

// defaultKeystrokes is the full data set, relative to the directory above
// the repository root (the one holding go.work).
var defaultKeystrokes = filepath.Join("tools", "keystrokes", "data", "neuroqwerty_controls_keystrokes.csv")

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if buildinfo.HandleFlag("ellipsis-loadgen", args, os.Stdout) {
		return 0
	}
	f, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	if *f.side != "" {
		return sideBySide(*f.side, *f.sideNames)
	}
	if *f.compare != "" {
		return comparePeers(*f.compare, *f.loadName, *f.jsonOut)
	}
	if *f.sweep != "" {
		return peerSweep(*f.sweep, *f.loadName, *f.p99Target, *f.jsonOut)
	}
	opts, err := f.options()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ellipsis-loadgen: %v\n", err)
		return 2
	}
	if *f.verbose {
		log, err := logging.New("warn", "console")
		if err == nil {
			opts.Logger = log
			defer log.Sync() //nolint:errcheck
		}
	}
	if err := f.stackAndReplay(&opts); err != nil {
		fmt.Fprintf(os.Stderr, "ellipsis-loadgen: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *f.cpuProfile != "" {
		stopProfile, err := startCPUProfile(*f.cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -cpuprofile: %v\n", err)
			return 2
		}
		defer stopProfile()
	}
	opts.BeforeClose = f.beforeClose()
	res, err := loadgen.Run(ctx, opts)
	if res != nil && len(f.labels) > 0 {
		res.Labels = f.labels
	}
	return report(res, err, *f.jsonOut)
}

// startCPUProfile writes a CPU profile of this process to path until the
// returned stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// beforeClose is what runs at the end of the run, connections still open:
// the -scrape lines and the -memprofile heap profile; nil for neither.
func (f *flags) beforeClose() func() {
	var before []func()
	if *f.scrape != "" {
		before = append(before, func() { printRuntimeMetrics(*f.scrape) })
	}
	if *f.memProfile != "" {
		before = append(before, func() { writeHeapProfile(*f.memProfile) })
	}
	if len(before) == 0 {
		return nil
	}
	return func() {
		for _, fn := range before {
			fn()
		}
	}
}

// writeHeapProfile writes a heap profile of the live heap to path.
func writeHeapProfile(path string) {
	runtime.GC() // up-to-date live heap
	f, err := os.Create(path)
	if err == nil {
		err = pprof.WriteHeapProfile(f)
		f.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -memprofile: %v\n", err)
	}
}

// report prints the summary table of res and writes its JSON to jsonOut
// (when set), and returns the exit code: 1 when the run or the write
// failed.
func report(res *loadgen.Result, err error, jsonOut string) int {
	if res != nil {
		res.WriteTable(os.Stdout)
		if jsonOut != "" && !writeJSON(jsonOut, res) {
			return 1
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ellipsis-loadgen: %v\n", err)
		return 1
	}
	return 0
}

// parsePIDs reads a comma-separated list of process ids.
func parsePIDs(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a process id", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// comparePeers prints the peer table of two -json outputs (Ellipsis
// first) and, with out set, writes them with their ratios.
func comparePeers(files, load, out string) int {
	paths := splitList(files)
	if len(paths) != 2 {
		fmt.Fprintln(os.Stderr, "ellipsis-loadgen: -compare wants two files: ELLIPSIS.json,CENTRIFUGO.json")
		return 2
	}
	var res [2]*loadgen.Result
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil {
			err = json.Unmarshal(b, &res[i])
		}
		if err != nil || res[i] == nil {
			fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -compare: %s: %v\n", p, err)
			return 1
		}
	}
	peers := loadgen.ComparePeers(load, res[0], res[1])
	peers.WriteTable(os.Stdout)
	if out != "" && !writeJSON(out, peers) {
		return 1
	}
	return 0
}

// peerSweep prints the sweep table of -json outputs (-sweep) against a
// p99 target (ms) and, with out set, writes it as JSON.
func peerSweep(files, load string, p99TargetMs float64, out string) int {
	paths := splitList(files)
	if p99TargetMs <= 0 {
		fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -p99-target %g: want a positive number of ms\n", p99TargetMs)
		return 2
	}
	res := make([]*loadgen.Result, len(paths))
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil {
			err = json.Unmarshal(b, &res[i])
		}
		if err != nil || res[i] == nil {
			fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -sweep: %s: %v\n", p, err)
			return 1
		}
	}
	s := loadgen.NewSweep(load, p99TargetMs, res)
	s.WriteTable(os.Stdout)
	if out != "" && !writeJSON(out, s) {
		return 1
	}
	return 0
}

// sideBySide prints the side-by-side table of -json outputs (-side), the
// columns named by names (default the file names).
func sideBySide(files, names string) int {
	paths, cols := splitList(files), splitList(names)
	if len(cols) == 0 {
		for _, p := range paths {
			cols = append(cols, strings.TrimSuffix(filepath.Base(p), ".json"))
		}
	}
	if len(paths) == 0 || len(cols) != len(paths) {
		fmt.Fprintln(os.Stderr, "ellipsis-loadgen: -side wants one or more files and as many -side-names")
		return 2
	}
	res := make([]*loadgen.Result, len(paths))
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil {
			err = json.Unmarshal(b, &res[i])
		}
		if err != nil || res[i] == nil {
			fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -side: %s: %v\n", p, err)
			return 1
		}
	}
	loadgen.WriteSideBySide(os.Stdout, cols, res)
	return 0
}

// writeJSON writes v as indented JSON to path (-json); false, said on
// stderr, when it cannot.
func writeJSON(path string, v any) bool {
	b, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -json: %v\n", err)
		return false
	}
	return true
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// checkLoopback refuses a URL whose host is not a loopback address (names
// are resolved; every address must be loopback).
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return fmt.Errorf("url %q: not a URL with a host", raw)
	}
	host := u.Hostname()
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		addrs, err := net.LookupIP(host)
		if err != nil {
			return fmt.Errorf("url %q: %w", raw, err)
		}
		ips = addrs
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("url %q: %s is not a loopback address", raw, ip)
		}
	}
	return nil
}

// loadKeystrokes reads path, or else the full data set in the repository
// (when run inside a checkout), or else the embedded sample; it says which.
func loadKeystrokes(path string) ([]keystrokes.Session, string, error) {
	if path != "" {
		s, err := keystrokes.Load(path)
		if err != nil {
			return nil, "", err
		}
		return s, path, nil
	}
	if root, ok := repoRoot(); ok {
		p := filepath.Join(root, defaultKeystrokes)
		if _, err := os.Stat(p); err == nil {
			s, err := keystrokes.Load(p)
			if err != nil {
				return nil, "", err
			}
			return s, filepath.Clean(p), nil
		}
	}
	s, err := keystrokes.Sample()
	if err != nil {
		return nil, "", err
	}
	fmt.Fprintln(os.Stderr, "ellipsis-loadgen: the full keystroke data set was not found (run inside a checkout, or pass -keystrokes); replaying the embedded sample (3 sessions)")
	return s, "embedded sample", nil
}

// repoRoot is the nearest directory at or above the working directory
// holding go.work.
func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// printRuntimeMetrics prints the go_goroutines, go_memstats_* (memory in
// use) and process_* lines of a Prometheus /metrics page.
func printRuntimeMetrics(u string) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(u)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -scrape: %v\n", err)
		return
	}
	defer resp.Body.Close()
	fmt.Printf("\n%s at the end of the run (connections open):\n", u)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range []string{"go_goroutines ", "go_memstats_heap_inuse_bytes ", "go_memstats_heap_alloc_bytes ", "go_memstats_stack_inuse_bytes ", "go_memstats_sys_bytes ", "process_resident_memory_bytes ", "ellipsis_gateway_connections ", "ellipsis_gateway_joined_rooms "} {
			if strings.HasPrefix(line, p) {
				fmt.Println("  " + line)
			}
		}
	}
}
