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

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
	"github.com/ellipsis-chat/ellipsis/shared/config"
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
	fs := flag.NewFlagSet("ellipsis-loadgen", flag.ContinueOnError)
	var (
		urls        = fs.String("url", loadgen.DefaultURL, "gateway WebSocket endpoints, comma-separated (ignored with -stack; -system centrifugo: default "+loadgen.DefaultCentrifugoURL+")")
		system      = fs.String("system", loadgen.SystemEllipsis, "system under test: ellipsis (its gateways) or centrifugo (Centrifugo v6, JSON protocol over WebSocket; needs -jwt-secret, its client.token.hmac_secret_key)")
		cfNamespace = fs.String("centrifugo-namespace", loadgen.DefaultCentrifugoNamespace, "-system centrifugo: the channel namespace of the rooms (room R is channel <namespace>:R)")
		cpuPIDs     = fs.String("cpu-pids", "", "comma-separated pids of the system's server processes (gateway, worker, NATS, Redis; or Centrifugo and its Redis): their CPU time over the run, per state change")
		compare     = fs.String("compare", "", "ELLIPSIS.json,CENTRIFUGO.json: print the peer table of two runs' -json outputs (no run); -json writes the pair with the ratios")
		loadName    = fs.String("load", "custom", "-compare: the load's name in the table (L1, L2, L3)")
		mode        = fs.String("mode", loadgen.ModeRate, "rate (fixed rate of state changes), replay (real keystrokes through the SDK timers) or idle (connect, join, send nothing)")
		conns       = fs.Int("conns", loadgen.DefaultConns, "connections to open (one user each)")
		rooms       = fs.Int("rooms", loadgen.DefaultRooms, "rooms to spread them over (connection i joins room i % rooms)")
		rate        = fs.Float64("rate", loadgen.DefaultRate, "rate mode: typing state changes per second, all connections together")
		share       = fs.Float64("typing-share", 1, "fraction of connections that type; the others only listen")
		duration    = fs.Duration("duration", loadgen.DefaultDuration, "how long typing is driven (idle: how long connections stay open)")
		settle      = fs.Duration("settle", loadgen.DefaultSettle, "keep reading at least this long after the last send (then while deliveries are missing and frames still arrive)")
		settleMax   = fs.Duration("settle-max", loadgen.DefaultSettleMax, "keep reading at most this long after the last send")
		ksPath      = fs.String("keystrokes", "", "replay mode: keystroke CSV (default: tools/keystrokes/data/neuroqwerty_controls_keystrokes.csv in the repository, else the embedded sample)")
		speed       = fs.Float64("speed", 1, "replay mode: divide recorded keystroke times by this (client timers stay real time)")
		spread      = fs.Duration("spread", loadgen.DefaultReplaySpread, "replay mode: clients start typing within this window")
		seed        = fs.Uint64("seed", 1, "replay mode: random seed (first message, start offset)")
		secret      = fs.String("jwt-secret", "", "mint HS256 tokens with the gateway's secret (ELLIPSIS_AUTH=jwt); default $ELLIPSIS_JWT_SECRET")
		dialTimeout = fs.Duration("dial-timeout", loadgen.DefaultDialTimeout, "bound on each handshake and join")
		dialConc    = fs.Int("dial-concurrency", loadgen.DefaultDialConcurrency, "handshakes in flight at once")
		sourceIPs   = fs.Int("source-ips", loadgen.DefaultSourceIPs, "spread connections to a loopback target over this many source addresses 127.0.0.1..N (-1: kernel's choice)")
		rssPID      = fs.Int("rss-pid", 0, "watch this process (the gateway, or the stack) in /proc: RSS before, during and after (bytes per connection), and CPU time over the run (per state change, per frame)")
		stack       = fs.Bool("stack", false, "start an in-process stack (gateway + worker, embedded NATS, Redis on 127.0.0.1:6379 or embedded) with unique prefixes and target it; ELLIPSIS_* variables configure it")
		jsonOut     = fs.String("json", "", "also write the summary as JSON to this file")
		quiet       = fs.Bool("q", false, "no progress lines")
		verbose     = fs.Bool("v", false, "log the stack and failed connections (stderr)")
		remote      = fs.Bool("allow-remote", false, "allow targets that are not loopback addresses")
		cpuProfile  = fs.String("cpuprofile", "", "write a CPU profile of this process (with -stack: the stack too) to this file")
		scrape      = fs.String("scrape", "", "at the end of the run, connections still open, print the Go runtime and process lines of this /metrics URL (the gateway's admin /metrics)")
		memProfile  = fs.String("memprofile", "", "write a heap profile of this process (with -stack: the stack too) to this file at the end of the run, connections still open")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: ellipsis-loadgen [flags]\n\nOpens -conns WebSocket connections over -rooms rooms, drives typing, and measures end-to-end latency.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *secret == "" { // not the flag's default: -h would print it
		*secret = os.Getenv("ELLIPSIS_JWT_SECRET")
	}
	if *compare != "" {
		return comparePeers(*compare, *loadName, *jsonOut)
	}
	urlSet := false
	fs.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "url" })
	if *system == loadgen.SystemCentrifugo && !urlSet {
		*urls = loadgen.DefaultCentrifugoURL
	}
	pids, err := parsePIDs(*cpuPIDs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -cpu-pids: %v\n", err)
		return 2
	}
	opts := loadgen.Options{
		System: *system, CentrifugoNamespace: *cfNamespace, CPUPIDs: pids,
		URLs: splitList(*urls), Mode: *mode, Conns: *conns, Rooms: *rooms, Rate: *rate, TypingShare: *share,
		Duration: *duration, Settle: *settle, SettleMax: *settleMax, Speed: *speed, ReplaySpread: *spread, Seed: *seed,
		JWTSecret: *secret, DialTimeout: *dialTimeout, DialConcurrency: *dialConc, SourceIPs: *sourceIPs,
		RSSPID: *rssPID, Stack: *stack,
	}
	if !*quiet {
		opts.Progress = os.Stdout
	}
	if *speed <= 0 || *rate <= 0 || *share <= 0 || *duration <= 0 {
		fmt.Fprintln(os.Stderr, "ellipsis-loadgen: -speed, -rate, -typing-share and -duration must be positive")
		return 2
	}
	if !*stack && !*remote {
		for _, u := range opts.URLs {
			if err := checkLoopback(u); err != nil {
				fmt.Fprintf(os.Stderr, "ellipsis-loadgen: %v (pass -allow-remote to load another machine)\n", err)
				return 2
			}
		}
	}
	if *verbose {
		log, err := logging.New("warn", "console")
		if err == nil {
			opts.Logger = log
			defer log.Sync() //nolint:errcheck
		}
	}
	if *stack {
		cfg, err := config.Load(nil, nil, os.LookupEnv, config.Dev())
		if err != nil {
			fmt.Fprintf(os.Stderr, "ellipsis-loadgen: stack configuration: %v\n", err)
			return 2
		}
		if !cfg.IsSet("ELLIPSIS_LOG_LEVEL") {
			cfg.LogLevel = "warn"
		}
		opts.StackConfig = &cfg
		if opts.Logger == nil {
			opts.Logger = zap.NewNop()
		}
	}
	if *mode == loadgen.ModeReplay {
		sessions, src, err := loadKeystrokes(*ksPath)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ellipsis-loadgen: %v\n", err)
			return 2
		}
		opts.Keystrokes, opts.KeystrokesSource = sessions, src
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -cpuprofile: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -cpuprofile: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	var before []func()
	if *scrape != "" {
		before = append(before, func() { printRuntimeMetrics(*scrape) })
	}
	if *memProfile != "" {
		before = append(before, func() {
			runtime.GC() // up-to-date live heap
			f, err := os.Create(*memProfile)
			if err == nil {
				err = pprof.WriteHeapProfile(f)
				f.Close()
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -memprofile: %v\n", err)
			}
		})
	}
	if len(before) > 0 {
		opts.BeforeClose = func() {
			for _, f := range before {
				f()
			}
		}
	}
	res, err := loadgen.Run(ctx, opts)
	if res != nil {
		res.WriteTable(os.Stdout)
		if *jsonOut != "" {
			b, _ := json.MarshalIndent(res, "", "  ")
			if werr := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); werr != nil {
				fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -json: %v\n", werr)
				return 1
			}
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
	if out != "" {
		b, _ := json.MarshalIndent(peers, "", "  ")
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "ellipsis-loadgen: -json: %v\n", err)
			return 1
		}
	}
	return 0
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
