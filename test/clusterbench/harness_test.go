// Package clusterbench measures what Ellipsis's room events cost a Redis
// Cluster with classic Pub/Sub (PUBLISH / SUBSCRIBE) against sharded
// Pub/Sub (SPUBLISH / SSUBSCRIBE): cluster bus messages and bytes, and each
// master's CPU, for one fixed typing load (docs/BENCHMARKS.md, "Redis
// Cluster: classic PUBLISH vs sharded Pub/Sub").
//
// Each run starts its own 3-master Redis Cluster and a one-node NATS
// (clusterenv, spare loopback ports, never the machine's shared servers),
// workers and gateways in-process with one shared key and subject prefix,
// one watcher WebSocket per room, and a driver that publishes typing
// commands straight on the workers' NATS subject at a fixed rate.
//
// The package holds test files only. `go test ./clusterbench/` runs the
// quick sanity test (a tiny load in each mode); the measurement is
//
//	go test -run '^$' -bench ClusterBusTraffic -benchtime 1x -count 1 ./clusterbench/
//
// with the load shape overridable by ELLIPSIS_BENCH_ROOMS, ELLIPSIS_BENCH_RATE
// (commands/s) and ELLIPSIS_BENCH_SECONDS.
package clusterbench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	gateway "github.com/ellipsis-chat/ellipsis/services/gateway"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/worker"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/test/clusterenv"
	"github.com/ellipsis-chat/ellipsis/testkit/inproc"
)

// Pub/Sub modes (config.Config.RedisPubSub).
const (
	modeClassic = "classic"
	modeSharded = "sharded"
)

// busPortOffset is Redis Cluster's bus port offset (bus = client port + 10000).
const busPortOffset = 10000

// shape is one fixed typing load and the stack that serves it.
type shape struct {
	Masters  int           // Redis Cluster masters
	Gateways int           // in-process gateways; watcher i connects to gateway i % Gateways
	Workers  int           // in-process presence workers
	Rooms    int           // rooms, spread evenly over the masters, one watcher each
	Rate     int           // typing commands per second, all rooms together
	Duration time.Duration // load window (the command count is Rate*Duration, rounded down to whole start/stop pairs per room)
}

// commands is the number of commands of one load window: Rate*Duration
// rounded down to a multiple of 2*Rooms, so every room gets as many stops
// as starts and no entry is left to expire (an expiry would publish an
// extra event after the window).
func (s shape) commands() int {
	n := int(float64(s.Rate) * s.Duration.Seconds())
	return n / (2 * s.Rooms) * (2 * s.Rooms)
}

// envInt returns the integer environment variable name, or def when unset.
func envInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func randomToken() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stack is one private Redis Cluster and NATS with workers and gateways in
// Pub/Sub mode mode.
type stack struct {
	tb       testing.TB
	mode     string
	shape    shape
	rc       *clusterenv.RedisCluster
	natsURL  string
	cfg      config.Config
	names    names.Names
	gateways []*gateway.Server
	workers  []*worker.Server
	svc      *inproc.Stack // nil until started
	pids     []int         // redis-server process id of each master
	natsPID  int           // the nats-server's process id; 0 unknown
}

// newStack starts a fresh cluster and the services. Everything stops in
// tb's cleanup (services first, then the servers).
func newStack(tb testing.TB, mode string, sh shape) *stack {
	tb.Helper()
	rc := clusterenv.StartRedisCluster(tb, sh.Masters)
	nc := clusterenv.StartNATSCluster(tb, 1)
	tok := randomToken()
	cfg := config.Dev()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.AdminAddr = ""
	cfg.RedisURL = rc.URL()
	cfg.RedisPubSub = mode
	cfg.NATSURL = nc.URL()
	cfg.KeyPrefix = "cb-" + tok + ":"
	cfg.SubjectPrefix = "cb" + tok
	cfg.ShutdownDrain = 100 * time.Millisecond
	cfg.LogLevel = "warn"
	if err := cfg.Validate(); err != nil {
		tb.Fatalf("config: %v", err)
	}
	s := &stack{tb: tb, mode: mode, shape: sh, rc: rc, natsURL: nc.URL(), cfg: cfg, names: names.New(cfg.KeyPrefix, cfg.SubjectPrefix)}
	tb.Cleanup(s.shutdown)
	s.natsPID = natsPID(nc.URL())
	for i := range sh.Masters {
		pid, err := strconv.Atoi(rc.Info(tb, i, "server")["process_id"])
		if err != nil {
			tb.Fatalf("master %d: INFO server process_id: %v", i, err)
		}
		s.pids = append(s.pids, pid)
	}

	log := zaptest.NewLogger(tb, zaptest.Level(zap.WarnLevel), zaptest.WrapOptions(zap.WrapCore(
		func(c zapcore.Core) zapcore.Core { return quietAuthOff{c} })))
	s.svc = inproc.StartT(tb, inproc.Options{Config: cfg, Workers: sh.Workers, Gateways: sh.Gateways, GatewayIDSuffix: tok, Logger: log})
	s.gateways, s.workers = s.svc.Gateways, s.svc.Workers
	return s
}

// quietAuthOff drops the gateways' "authentication is OFF" warning (the
// stack uses dev auth on purpose), keeping every other warning.
type quietAuthOff struct{ zapcore.Core }

func (q quietAuthOff) With(f []zapcore.Field) zapcore.Core { return quietAuthOff{q.Core.With(f)} }

func (q quietAuthOff) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if strings.HasPrefix(e.Message, "authentication is OFF") {
		return ce
	}
	return q.Core.Check(e, ce)
}

func (s *stack) shutdown() {
	if s.svc != nil {
		s.svc.ShutdownWithin(10 * time.Second)
	}
}

// rooms returns n room names whose keys (and channels) are spread evenly
// over the masters, n/masters each (the first n%masters masters get one
// more), and the master serving each room.
func (s *stack) rooms(n int) ([]string, []int) {
	s.tb.Helper()
	ranges, err := s.rc.Client().ClusterSlots(context.Background()).Result()
	if err != nil {
		s.tb.Fatalf("CLUSTER SLOTS: %v", err)
	}
	index := map[string]int{}
	for i, a := range s.rc.Addrs() {
		index[a] = i
	}
	owner := func(slot int) int {
		for _, r := range ranges {
			if r.Start <= slot && slot <= r.End && len(r.Nodes) > 0 {
				if i, ok := index[r.Nodes[0].Addr]; ok {
					return i
				}
			}
		}
		s.tb.Fatalf("no master serves slot %d: %v", slot, ranges)
		return -1
	}
	want := make([]int, s.shape.Masters)
	for i := range want {
		want[i] = n / s.shape.Masters
		if i < n%s.shape.Masters {
			want[i]++
		}
	}
	var rooms []string
	var owners []int
	for k := 0; len(rooms) < n; k++ {
		if k > 100*n+1000 {
			s.tb.Fatalf("could not spread %d rooms over %d masters", n, s.shape.Masters)
		}
		room := fmt.Sprintf("bench-%d", k)
		key := s.names.UsersKey(room)
		if clusterenv.SlotOf(key) != clusterenv.SlotOf(s.names.RoomChannel(room)) {
			s.tb.Fatalf("room %q: key and channel in different slots", room)
		}
		o := owner(clusterenv.SlotOf(key))
		if want[o] > 0 {
			want[o]--
			rooms = append(rooms, room)
			owners = append(owners, o)
		}
	}
	return rooms, owners
}

// watchers is one WebSocket per room, each joined to its room, counting
// the typing events it receives.
type watchers struct {
	conns  []*websocket.Conn
	starts atomic.Int64
	stops  atomic.Int64
	other  atomic.Int64 // frames other than typing_start / typing_stop / pong
	errs   chan error
	wg     sync.WaitGroup
}

// events returns the typing events received so far.
func (w *watchers) events() int64 { return w.starts.Load() + w.stops.Load() }

// watch connects one watcher per room (room i on gateway i % gateways)
// and joins it, 8 joins at a time. Closed in tb's cleanup.
func (s *stack) watch(rooms []string) *watchers {
	s.tb.Helper()
	w := &watchers{conns: make([]*websocket.Conn, len(rooms)), errs: make(chan error, len(rooms)+16)}
	s.tb.Cleanup(w.close)
	var next atomic.Int64
	var setup sync.WaitGroup
	setupErrs := make(chan error, len(rooms))
	for range 8 {
		setup.Add(1)
		go func() {
			defer setup.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(rooms) {
					return
				}
				conn, err := s.join(i%len(s.gateways), fmt.Sprintf("w%d", i), rooms[i])
				if err != nil {
					setupErrs <- err
					return
				}
				w.conns[i] = conn
			}
		}()
	}
	setup.Wait()
	close(setupErrs)
	if err := <-setupErrs; err != nil {
		s.tb.Fatal(err)
	}
	for _, c := range w.conns {
		w.wg.Add(1)
		go w.read(c)
	}
	return w
}

// join dials gateway g as user and joins room, returning once "joined"
// arrived.
func (s *stack) join(g int, user, room string) (*websocket.Conn, error) {
	u := "ws://" + s.gateways[g].HTTPAddr() + "/v1/ws?" + url.Values{"user": {user}}.Encode()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	conn, _, err := d.Dial(u, nil)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", u, err)
	}
	id := "j-" + user
	if err := conn.WriteJSON(map[string]any{"type": "join", "room": room, "id": id}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: send join %s: %w", user, room, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		var f struct{ Type, ID, Code, Message string }
		if err := conn.ReadJSON(&f); err != nil {
			conn.Close()
			return nil, fmt.Errorf("%s: waiting for joined %s: %w", user, room, err)
		}
		switch {
		case f.Type == protocol.TypeJoined && f.ID == id:
			_ = conn.SetReadDeadline(time.Time{})
			return conn, nil
		case f.Type == protocol.TypeError:
			conn.Close()
			return nil, fmt.Errorf("%s: join %s: error %s: %s", user, room, f.Code, f.Message)
		}
	}
}

func (w *watchers) read(c *websocket.Conn) {
	defer w.wg.Done()
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			return
		}
		var f struct{ Type string }
		if err := json.Unmarshal(data, &f); err != nil {
			w.report(fmt.Errorf("undecodable frame %q: %v", data, err))
			continue
		}
		switch f.Type {
		case protocol.TypeTypingStart:
			w.starts.Add(1)
		case protocol.TypeTypingStop:
			w.stops.Add(1)
		case protocol.TypePong:
		case protocol.TypeError:
			w.report(fmt.Errorf("error frame %s", data))
			w.other.Add(1)
		default:
			w.other.Add(1)
		}
	}
}

func (w *watchers) report(err error) {
	select {
	case w.errs <- err:
	default:
	}
}

func (w *watchers) close() {
	for _, c := range w.conns {
		if c != nil {
			_ = c.Close()
		}
	}
	w.wg.Wait()
}

// firstErr returns the first error a watcher reported, or nil.
func (w *watchers) firstErr() error {
	select {
	case err := <-w.errs:
		return err
	default:
		return nil
	}
}

// driver publishes typing commands on the workers' subject as a platform
// service would: room k%R's typist "t<k%R>" (connection "c<k%R>") alternates
// start and stop, with increasing seq, so every command changes what the
// room shows and publishes exactly one room event.
type driver struct {
	nc      *nats.Conn
	subject string
	next    []uint64 // per room: commands sent so far
}

func (s *stack) driver() *driver {
	s.tb.Helper()
	nc, err := nats.Connect(s.natsURL, nats.Name("clusterbench-driver"))
	if err != nil {
		s.tb.Fatalf("driver: connect NATS: %v", err)
	}
	s.tb.Cleanup(nc.Close)
	return &driver{nc: nc, subject: s.names.CommandSubject()}
}

// run sends n commands over rooms at rate commands/s, paced against the
// wall clock (commands due are sent in bursts every millisecond or so),
// and returns how long it took and the largest lag behind schedule.
func (d *driver) run(rooms []string, n, rate int) (elapsed, maxLag time.Duration, err error) {
	if len(d.next) != len(rooms) {
		d.next = make([]uint64, len(rooms))
	}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for k := 0; k < n; k++ {
		due := start.Add(time.Duration(k) * interval)
		if wait := time.Until(due); wait > time.Millisecond {
			time.Sleep(wait)
		} else if lag := -wait; lag > maxLag {
			maxLag = lag
		}
		r := k % len(rooms)
		seq := d.next[r] + 1
		d.next[r] = seq
		op := protocol.OpStart
		if seq%2 == 0 {
			op = protocol.OpStop
		}
		// Each typist starts once and stops once (a new typist per pair in
		// the room), as people do: one typist toggling ten times a second
		// would be coalesced by the workers' transition rate limit, and
		// the events would no longer be one per command.
		pair := strconv.FormatUint((seq+1)/2, 10)
		cmd := protocol.Command{
			V: protocol.Version, Op: op, Room: rooms[r],
			User: "t" + strconv.Itoa(r) + "-" + pair, Conn: "c" + strconv.Itoa(r) + "-" + pair, Seq: 2 - seq%2,
			TsMs: time.Now().UnixMilli(),
		}
		if op == protocol.OpStart {
			cmd.Name = "Typist"
		}
		b, err := json.Marshal(cmd)
		if err != nil {
			return 0, 0, err
		}
		if err := d.nc.Publish(d.subject, b); err != nil {
			return 0, 0, fmt.Errorf("publish command %d: %w", k, err)
		}
	}
	if err := d.nc.Flush(); err != nil {
		return 0, 0, err
	}
	return time.Since(start), maxLag, nil
}

// nodeSample is one master's counters at one instant.
type nodeSample struct {
	msgs             map[string]int64 // cluster_stats_messages_* of CLUSTER INFO
	cpu              float64          // INFO cpu used_cpu_sys + used_cpu_user, seconds
	busSent, busRecv int64            // bytes on the node's cluster bus sockets (ss); -1 unknown
}

// sample is the whole cluster plus this process and the machine.
type sample struct {
	nodes   []nodeSample
	goCPU   time.Duration // this process: gateways, workers, driver, watchers
	natsCPU time.Duration // the nats-server; -1 unknown
	cpuBusy float64       // machine: non-idle jiffies (/proc/stat); -1 unknown
	cpuAll  float64       // machine: all jiffies
	at      time.Time
}

func (s *stack) sample() sample {
	s.tb.Helper()
	out := sample{at: time.Now(), cpuBusy: -1}
	bus, busErr := s.busBytes()
	if busErr != nil {
		s.tb.Logf("cluster bus bytes unavailable: %v", busErr)
	}
	for i := range s.shape.Masters {
		ns := nodeSample{msgs: map[string]int64{}, busSent: -1, busRecv: -1}
		for k, v := range s.rc.ClusterInfo(s.tb, i) {
			if strings.HasPrefix(k, "cluster_stats_messages_") {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					s.tb.Fatalf("master %d CLUSTER INFO %s = %q: %v", i, k, v, err)
				}
				ns.msgs[strings.TrimPrefix(k, "cluster_stats_messages_")] = n
			}
		}
		cpu := s.rc.Info(s.tb, i, "cpu")
		for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
			f, err := strconv.ParseFloat(cpu[k], 64)
			if err != nil {
				s.tb.Fatalf("master %d INFO cpu %s = %q: %v", i, k, cpu[k], err)
			}
			ns.cpu += f
		}
		if busErr == nil {
			ns.busSent, ns.busRecv = bus[s.pids[i]][0], bus[s.pids[i]][1]
		}
		out.nodes = append(out.nodes, ns)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		out.goCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	out.natsCPU = procCPU(s.natsPID)
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		if len(f) > 5 && f[0] == "cpu" {
			var all, idle float64
			for j, v := range f[1:] {
				x, _ := strconv.ParseFloat(v, 64)
				all += x
				if j == 3 || j == 4 { // idle, iowait
					idle += x
				}
			}
			out.cpuBusy, out.cpuAll = all-idle, all
		}
	}
	return out
}

// busBytes sums, per redis-server process id, the bytes sent and received
// (tcp_info bytes_sent / bytes_received, from `ss -tinp`) on its TCP
// sockets whose local or peer port is one of the masters' bus ports. Only
// sockets open at the time are seen: the bus links of a stable cluster
// stay open, so deltas between two calls are the bus traffic in between.
func (s *stack) busBytes() (map[int][2]int64, error) {
	busPorts := map[string]bool{}
	for _, a := range s.rc.Addrs() {
		i := strings.LastIndexByte(a, ':')
		p, err := strconv.Atoi(a[i+1:])
		if err != nil {
			return nil, fmt.Errorf("address %q: %v", a, err)
		}
		busPorts[strconv.Itoa(p+busPortOffset)] = true
	}
	pids := map[int]bool{}
	for _, p := range s.pids {
		pids[p] = true
	}
	outb, err := exec.Command("ss", "-tinpH", "state", "established").Output()
	if err != nil {
		return nil, fmt.Errorf("ss -tinpH: %v", err)
	}
	res := map[int][2]int64{}
	sc := bufio.NewScanner(bytes.NewReader(outb))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var pid int // owner of the socket whose info line comes next; 0 = not ours
	seen := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			pid = 0
			f := strings.Fields(line)
			// With "state established" ss omits the state column:
			// Recv-Q Send-Q Local Peer Process.
			if len(f) < 5 {
				continue
			}
			local, peer := portOf(f[2]), portOf(f[3])
			if !busPorts[local] && !busPorts[peer] {
				continue
			}
			if p := pidOf(line); pids[p] {
				pid = p
			}
			continue
		}
		if pid == 0 {
			continue
		}
		v := res[pid]
		for _, tok := range strings.Fields(line) {
			if n, ok := strings.CutPrefix(tok, "bytes_sent:"); ok {
				x, _ := strconv.ParseInt(n, 10, 64)
				v[0] += x
			} else if n, ok := strings.CutPrefix(tok, "bytes_received:"); ok {
				x, _ := strconv.ParseInt(n, 10, 64)
				v[1] += x
			}
		}
		res[pid] = v
		seen++
		pid = 0
	}
	if seen == 0 {
		return nil, errors.New("ss shows no bus socket of the masters")
	}
	return res, nil
}

// natsPID returns the process id of the nats-server serving the client URL
// nats://127.0.0.1:<port> (found by its "-p <port>" argument in /proc), or
// 0 when it cannot be found (not Linux).
func natsPID(natsURL string) int {
	port := portOf(natsURL)
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.HasSuffix(args[0], "nats-server") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-p" && args[i+1] == port {
				return pid
			}
		}
	}
	return 0
}

// procCPU returns the user + system CPU time of process pid from
// /proc/<pid>/stat (USER_HZ 100), or -1.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// portOf returns the port of an ss address "127.0.0.1:12345" or "[::1]:1".
func portOf(a string) string {
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		return ""
	}
	return strings.TrimRight(a[i+1:], "/")
}

// pidOf returns the first pid=N of an ss -p line, or 0.
func pidOf(line string) int {
	_, rest, ok := strings.Cut(line, "pid=")
	if !ok {
		return 0
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	p, _ := strconv.Atoi(rest[:end])
	return p
}

// nodeDelta is one master's change over a load window.
type nodeDelta struct {
	rooms            int              // rooms whose keys it serves
	msgs             map[string]int64 // cluster_stats_messages_* deltas (absent = 0)
	cpu              time.Duration    // used_cpu_sys + used_cpu_user
	busSent, busRecv int64            // bus bytes; -1 unknown
}

func (n nodeDelta) msg(k string) int64 { return n.msgs[k] }

// result is one mode's measurement, summed over its load windows.
type result struct {
	mode      string
	windows   int
	commands  int64
	events    int64 // typing events the watchers received
	elapsed   time.Duration
	maxLag    time.Duration
	nodes     []nodeDelta
	goCPU     time.Duration
	natsCPU   time.Duration // -1 unknown
	machBusy  float64       // fraction of the machine's CPU busy over the windows; -1 unknown
	machBusyN int
	idle      *result // the same counters over a window without load before the first load window; nil if none
}

func (r *result) add(before, after sample, rooms []int) {
	if r.nodes == nil {
		r.nodes = make([]nodeDelta, len(before.nodes))
		for i := range r.nodes {
			r.nodes[i].msgs = map[string]int64{}
		}
		for _, o := range rooms {
			r.nodes[o].rooms++
		}
	}
	for i := range before.nodes {
		b, a, d := before.nodes[i], after.nodes[i], &r.nodes[i]
		for k, v := range a.msgs {
			d.msgs[k] += v - b.msgs[k]
		}
		d.cpu += time.Duration((a.cpu - b.cpu) * float64(time.Second))
		if a.busSent >= 0 && b.busSent >= 0 && d.busSent >= 0 {
			d.busSent += a.busSent - b.busSent
			d.busRecv += a.busRecv - b.busRecv
		} else {
			d.busSent, d.busRecv = -1, -1
		}
	}
	r.goCPU += after.goCPU - before.goCPU
	if before.natsCPU >= 0 && after.natsCPU >= 0 && r.natsCPU >= 0 {
		r.natsCPU += after.natsCPU - before.natsCPU
	} else {
		r.natsCPU = -1
	}
	if before.cpuBusy >= 0 && after.cpuBusy >= 0 && after.cpuAll > before.cpuAll {
		busy := (after.cpuBusy - before.cpuBusy) / (after.cpuAll - before.cpuAll)
		r.machBusy = (r.machBusy*float64(r.machBusyN) + busy) / float64(r.machBusyN+1)
		r.machBusyN++
	} else if r.machBusyN == 0 {
		r.machBusy = -1
	}
}

// total sums a message counter over the masters.
func (r *result) total(k string) int64 {
	var n int64
	for _, d := range r.nodes {
		n += d.msg(k)
	}
	return n
}

func (r *result) totalCPU() time.Duration {
	var c time.Duration
	for _, d := range r.nodes {
		c += d.cpu
	}
	return c
}

func (r *result) totalBus() int64 {
	var n int64
	for _, d := range r.nodes {
		if d.busSent < 0 {
			return -1
		}
		n += d.busSent
	}
	return n
}

// table renders the per-master figures, one line per master plus a total
// (and two summary lines before, one idle line after: 9 lines for 3
// masters).
func (r *result) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mode %s: %d window(s), %d commands in %s (%.0f/s, driver max lag %s), %d typing events delivered to the watchers",
		r.mode, r.windows, r.commands, r.elapsed.Round(time.Millisecond), float64(r.commands)/r.elapsed.Seconds(),
		r.maxLag.Round(time.Millisecond), r.events)
	if extra := r.otherCounters(); extra != "" {
		fmt.Fprintf(&b, "; other bus counters: %s", extra)
	}
	b.WriteString("\n")
	stack := r.totalCPU() + r.goCPU
	natsCPU := "n/a"
	if r.natsCPU >= 0 {
		stack += r.natsCPU
		natsCPU = r.natsCPU.Round(time.Millisecond).String()
	}
	fmt.Fprintf(&b, "CPU over the window: masters %s, nats-server %s, this process (gateways, workers, driver, watchers) %s; stack %.2f cores; whole machine busy %s (other jobs included)\n",
		r.totalCPU().Round(time.Millisecond), natsCPU, r.goCPU.Round(time.Millisecond), stack.Seconds()/r.elapsed.Seconds(), pct(r.machBusy))
	fmt.Fprintf(&b, "%-6s %5s %9s %9s %9s %9s %9s %9s %9s %9s %9s %10s %10s %8s\n",
		"master", "rooms", "msgs-sent", "msgs-recv", "ping-sent", "pong-sent", "pub-sent", "pub-recv", "pshd-sent", "pshd-recv", "other-snt", "bus-KB-out", "bus-KB-in", "cpu-ms")
	line := func(name string, rooms int, get func(string) int64, busOut, busIn int64, cpu time.Duration) {
		other := get("sent") - get("ping_sent") - get("pong_sent") - get("publish_sent") - get("publishshard_sent")
		fmt.Fprintf(&b, "%-6s %5d %9d %9d %9d %9d %9d %9d %9d %9d %9d %10s %10s %8d\n",
			name, rooms, get("sent"), get("received"), get("ping_sent"), get("pong_sent"),
			get("publish_sent"), get("publish_received"), get("publishshard_sent"), get("publishshard_received"),
			other, kb(busOut), kb(busIn), cpu.Milliseconds())
	}
	var busIn int64
	for i, d := range r.nodes {
		line(strconv.Itoa(i), d.rooms, d.msg, d.busSent, d.busRecv, d.cpu)
		if d.busRecv < 0 || busIn < 0 {
			busIn = -1
		} else {
			busIn += d.busRecv
		}
	}
	rooms := 0
	for _, d := range r.nodes {
		rooms += d.rooms
	}
	line("total", rooms, r.total, r.totalBus(), busIn, r.totalCPU())
	if id := r.idle; id != nil && id.elapsed > 0 {
		sec := id.elapsed.Seconds()
		fmt.Fprintf(&b, "idle baseline (%s without load before the window), per master per second:", id.elapsed.Round(time.Millisecond))
		for i, d := range id.nodes {
			sep := ";"
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s [%d] %.1f msgs-sent, %s KB-out, %.1f cpu-ms", sep, i, float64(d.msg("sent"))/sec,
				kb(int64(float64(d.busSent)/sec)), float64(d.cpu.Microseconds())/1000/sec)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// otherCounters lists the message counters that moved besides ping, pong,
// publish and publishshard ("" when none did), e.g. "meet_sent=1".
func (r *result) otherCounters() string {
	var extra []string
	kinds := map[string]bool{}
	for _, d := range r.nodes {
		for k, v := range d.msgs {
			if v != 0 {
				kinds[k] = true
			}
		}
	}
	for k := range kinds {
		switch k {
		case "sent", "received", "ping_sent", "ping_received", "pong_sent", "pong_received",
			"publish_sent", "publish_received", "publishshard_sent", "publishshard_received":
		default:
			extra = append(extra, fmt.Sprintf("%s=%d", k, r.total(k)))
		}
	}
	sort.Strings(extra)
	return strings.Join(extra, " ")
}

func kb(n int64) string {
	if n < 0 {
		return "n/a"
	}
	return strconv.FormatFloat(float64(n)/1024, 'f', 1, 64)
}

func pct(f float64) string {
	if f < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}

// measure runs windows load windows of s.shape on an already started
// stack with its watchers, sampling the masters before and after each,
// after an idle window (no commands) of length idle when idle > 0.
// After the driver's last command it waits (up to drain) until the
// watchers have every event and the cluster bus has caught up (settled),
// then samples.
func (s *stack) measure(rooms []string, owners []int, w *watchers, d *driver, windows int, idle, drain time.Duration) *result {
	s.tb.Helper()
	r := &result{mode: s.mode, windows: windows}
	if idle > 0 {
		r.idle = &result{mode: s.mode}
		before := s.sample()
		time.Sleep(idle)
		after := s.sample()
		r.idle.add(before, after, owners)
		r.idle.elapsed = after.at.Sub(before.at)
	}
	n := s.shape.commands()
	for range windows {
		want := w.events() + int64(n)
		before := s.sample()
		elapsed, lag, err := d.run(rooms, n, s.shape.Rate)
		if err != nil {
			s.tb.Fatalf("driver: %v", err)
		}
		deadline := time.Now().Add(drain)
		for w.events() < want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		after := s.settled(before, deadline)
		r.add(before, after, owners)
		r.commands += int64(n)
		r.elapsed += elapsed
		r.maxLag = max(r.maxLag, lag)
		if err := w.firstErr(); err != nil {
			s.tb.Errorf("watcher: %v", err)
		}
	}
	r.events = w.events()
	return r
}

// settled samples the stack once the cluster bus has caught up with the
// window that began at before: a master counts a publish message as sent
// when it queues it on a link and as received when it has read it
// (cluster_stats_messages_* in CLUSTER INFO, Redis docs), so a watcher can
// have every event from the room's own master while another master has yet
// to read its copy. It polls every 10 ms until the publish messages
// received since before reach those sent, or until deadline, and returns
// the last sample.
func (s *stack) settled(before sample, deadline time.Time) sample {
	s.tb.Helper()
	for {
		after := s.sample()
		var sent, recv int64
		for i := range after.nodes {
			for _, k := range []string{"publish", "publishshard"} {
				sent += after.nodes[i].msgs[k+"_sent"] - before.nodes[i].msgs[k+"_sent"]
				recv += after.nodes[i].msgs[k+"_received"] - before.nodes[i].msgs[k+"_received"]
			}
		}
		if recv >= sent || !time.Now().Before(deadline) {
			return after
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// run starts a fresh stack in mode, joins the watchers, lets the cluster
// settle, and measures windows load windows.
func run(tb testing.TB, mode string, sh shape, windows int) *result {
	tb.Helper()
	s := newStack(tb, mode, sh)
	rooms, owners := s.rooms(sh.Rooms)
	w := s.watch(rooms)
	d := s.driver()
	// Subscriptions and gossip settle; nothing is typing yet.
	time.Sleep(500 * time.Millisecond)
	return s.measure(rooms, owners, w, d, windows, 0, 10*time.Second)
}
