package loadgen

import (
	"fmt"
	"time"
)

// Result is the outcome of a run; it marshals to the JSON of -json.
type Result struct {
	System          string   `json:"system"`
	Mode            string   `json:"mode"`
	URLs            []string `json:"urls"`
	Stack           string   `json:"stack,omitempty"`
	Conns           int      `json:"conns"`
	Connected       int64    `json:"connected"`
	TypingConns     int      `json:"typing_conns"`
	Rooms           int      `json:"rooms"`
	MembersPerRoom  float64  `json:"members_per_room"`
	Rate            float64  `json:"rate,omitempty"`
	Speed           float64  `json:"speed,omitempty"`
	Keystrokes      string   `json:"keystrokes,omitempty"`
	DurationSeconds float64  `json:"duration_s"`
	SettleSeconds   float64  `json:"settle_s"`
	ConnectSeconds  float64  `json:"connect_s"`
	RunID           string   `json:"run_id"`
	// Labels are the -label key=value pairs of the command line: what the
	// load generator cannot see of the system (tools/loadgen/peers.sh
	// sets LabelBatchWindow).
	Labels map[string]string `json:"labels,omitempty"`

	Sent struct {
		Starts    int64 `json:"starts"`
		Refreshes int64 `json:"refreshes"`
		Stops     int64 `json:"stops"`
	} `json:"sent"`
	// StateChangesPerSec is (starts + stops) / duration: the offered load.
	StateChangesPerSec float64 `json:"state_changes_per_s"`
	// FramesPerSec is every frame the clients read during the run (settle
	// included), per second of Duration.
	FramesPerSec float64 `json:"frames_per_s"`
	Delivered    struct {
		Frames          int64 `json:"frames"`
		ExpectedState   int64 `json:"expected_state"`
		MatchedState    int64 `json:"matched_state"`
		LostState       int64 `json:"lost_state"`
		ExpectedRefresh int64 `json:"expected_refresh"`
		MatchedRefresh  int64 `json:"matched_refresh"`
		Unmatched       int64 `json:"unmatched"`
		// Echoes are a sender's own events read back by the sender
		// (Centrifugo delivers publications to the publisher too):
		// neither expected, matched nor lost.
		Echoes int64 `json:"echoes"`
		// Replies are command replies read (Centrifugo answers every
		// publish); Pings the server pings answered.
		Replies         int64   `json:"replies,omitempty"`
		Pings           int64   `json:"pings,omitempty"`
		ExpiredStops    int64   `json:"expired_stops"`
		OtherStops      int64   `json:"other_stops"`
		SnapshotsPushed int64   `json:"snapshots_pushed"`
		EventsPerSecond float64 `json:"events_per_s"`
	} `json:"delivered"`
	// Latency: sender's write to receiver's read of state changes (a
	// typist appears or goes); Refresh: of refreshes.
	// FramesPerMemberPerSec is the frames the connections read while
	// typing was driven (settle excluded), per connection per second.
	FramesPerMemberPerSec float64 `json:"frames_per_member_per_s"`
	// ServerCPUPerSec is the CPU seconds per second of Options.CPUPIDs
	// while typing was driven (settle excluded); 0 without CPUPIDs.
	ServerCPUPerSec float64 `json:"server_cpu_per_s,omitempty"`
	// State, Stall, Watch: the cases of issue 25 (state.go, stall.go,
	// watch.go), when run.
	State   *StateResult     `json:"state,omitempty"`
	Stall   *StallResult     `json:"stall,omitempty"`
	Watch   *WatchResult     `json:"watch,omitempty"`
	Latency Latency          `json:"latency"`
	Refresh Latency          `json:"refresh_latency"`
	Errors  map[string]int64 `json:"errors"`
	RSS     *RSS             `json:"rss,omitempty"`
	// ServerCPU is the CPU time of Options.CPUPIDs over the run.
	ServerCPU *ServerCPU `json:"server_cpu,omitempty"`
	Machine   Machine    `json:"machine"`
}

// ServerCPU is the CPU time (user + system) the system's server processes
// used from the end of connecting to the end of the settle, read from
// /proc/<pid>/stat (utime + stime, 10 ms ticks).
type ServerCPU struct {
	// PIDs and Seconds: each process and its CPU time, in the order of
	// Options.CPUPIDs.
	PIDs    []int     `json:"pids"`
	Names   []string  `json:"names"`
	Seconds []float64 `json:"cpu_s"`
	// TotalSeconds is their sum; per state change sent (starts + stops)
	// and per frame the clients read, in microseconds.
	TotalSeconds        float64 `json:"total_cpu_s"`
	WindowSeconds       float64 `json:"window_s"`
	CPUPerStateChangeUs float64 `json:"cpu_per_state_change_us"`
	CPUPerFrameUs       float64 `json:"cpu_per_frame_us"`
}

// RSS is the resident memory of the process Options.RSSPID.
type RSS struct {
	PID         int   `json:"pid"`
	BeforeBytes int64 `json:"before_bytes"`
	AfterBytes  int64 `json:"after_bytes"`
	PeakBytes   int64 `json:"peak_bytes"`
	// PerConnBytes is (after - before) / connected.
	PerConnBytes float64 `json:"per_conn_bytes"`
	// CPUSeconds is the process's CPU time (user + system) from the end
	// of connecting to the end of the settle; per state change sent and
	// per frame the clients read, in microseconds.
	CPUSeconds          float64 `json:"cpu_s"`
	CPUPerStateChangeUs float64 `json:"cpu_per_state_change_us,omitempty"`
	CPUPerFrameUs       float64 `json:"cpu_per_frame_us,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs        int     `json:"cpus"`
	GoVersion   string  `json:"go"`
	LoadBefore  string  `json:"loadavg_before"`
	LoadAfter   string  `json:"loadavg_after"`
	NoFileLimit uint64  `json:"nofile_limit"`
	LoadgenCPU  float64 `json:"loadgen_cpu_s"`
}

// fillResult writes the counters, rates and latencies of the run into res
// once reading is over; settled is how long the settle lasted.
func (r *runner) fillResult(res *Result, settled time.Duration) {
	o := &r.opts
	r.st.collect()
	c := &r.st.c
	res.DurationSeconds = o.Duration.Seconds()
	res.SettleSeconds = settled.Seconds()
	res.Sent.Starts, res.Sent.Refreshes, res.Sent.Stops = c.sentStart.Load(), c.sentRefresh.Load(), c.sentStop.Load()
	res.StateChangesPerSec = float64(res.Sent.Starts+res.Sent.Stops) / o.Duration.Seconds()
	d := &res.Delivered
	d.Frames = c.framesIn.Load()
	d.ExpectedState, d.MatchedState = c.expectState.Load(), c.matchedState.Load()
	d.LostState = d.ExpectedState - d.MatchedState
	d.ExpectedRefresh, d.MatchedRefresh = c.expectRefresh.Load(), c.matchedRefr.Load()
	d.Unmatched, d.ExpiredStops, d.OtherStops, d.SnapshotsPushed = c.unmatched.Load(), c.expiredStops.Load(), c.otherStops.Load(), c.snapshots.Load()
	d.Echoes, d.Replies, d.Pings = c.echoes.Load(), c.replies.Load(), c.pings.Load()
	res.FramesPerSec = float64(d.Frames) / o.Duration.Seconds()
	d.EventsPerSecond = float64(d.MatchedState+d.MatchedRefresh) / o.Duration.Seconds()
	r.st.mu.Lock()
	res.Latency = summarize(r.st.totalState)
	res.Refresh = summarize(r.st.totalRefr)
	r.st.mu.Unlock()
	res.Errors = r.st.errors()
	if d.Unmatched > 0 {
		res.Errors["unmatched_event"] = d.Unmatched
	}
	if d.LostState > 0 && o.StateSample == 0 {
		// Not read by the end of the settle. With StateSample (a big
		// room), members in summary mode get no events by design.
		res.Errors["missing_delivery"] = d.LostState
	}
}

// cpuMark is the CPU time of the measured processes at the start of the
// measured window (the end of connecting).
type cpuMark struct {
	rss     time.Duration   // Options.RSSPID's; 0 without it
	servers []time.Duration // Options.CPUPIDs', in their order
	at      time.Time
}

// markCPU reads the CPU time of Options.RSSPID and Options.CPUPIDs.
func (r *runner) markCPU() (cpuMark, error) {
	o := &r.opts
	var m cpuMark
	if o.RSSPID > 0 {
		m.rss, _ = readCPU(o.RSSPID)
	}
	var err error
	if m.servers, err = readCPUs(o.CPUPIDs); err != nil {
		return m, fmt.Errorf("loadgen: -cpu-pids: %w", err)
	}
	m.at = time.Now()
	return m, nil
}

// perStateChangeAndFrame divides cpu by the state changes sent and by the
// frames read, in microseconds (0 when there were none).
func perStateChangeAndFrame(res *Result, cpu time.Duration) (perChange, perFrame float64) {
	if n := res.Sent.Starts + res.Sent.Stops; n > 0 {
		perChange = float64(cpu.Microseconds()) / float64(n)
	}
	if res.Delivered.Frames > 0 {
		perFrame = float64(cpu.Microseconds()) / float64(res.Delivered.Frames)
	}
	return perChange, perFrame
}

// fillServerCPU sets res.ServerCPU from the CPU times of Options.CPUPIDs
// at the mark and after the settle (after, read with error afterErr).
func (r *runner) fillServerCPU(res *Result, mark cpuMark, after []time.Duration, afterErr error, window time.Duration) error {
	o := &r.opts
	if len(o.CPUPIDs) == 0 {
		return nil
	}
	if afterErr != nil {
		return fmt.Errorf("loadgen: -cpu-pids (a server process ended during the run?): %w", afterErr)
	}
	sc := &ServerCPU{PIDs: o.CPUPIDs, WindowSeconds: window.Seconds()}
	var total time.Duration
	for i, pid := range o.CPUPIDs {
		dt := after[i] - mark.servers[i]
		total += dt
		sc.Names = append(sc.Names, processName(pid))
		sc.Seconds = append(sc.Seconds, dt.Seconds())
	}
	sc.TotalSeconds = total.Seconds()
	sc.CPUPerStateChangeUs, sc.CPUPerFrameUs = perStateChangeAndFrame(res, total)
	res.ServerCPU = sc
	return nil
}

// fillRSS sets res.RSS from Options.RSSPID's resident memory (before: read
// before connecting) and its CPU time since the mark.
func (r *runner) fillRSS(res *Result, before int64, mark cpuMark) error {
	o := &r.opts
	if o.RSSPID <= 0 {
		return nil
	}
	cpuAfter, _ := readCPU(o.RSSPID)
	after, err := readRSS(o.RSSPID)
	if err != nil {
		return fmt.Errorf("loadgen: -rss-pid: %w", err)
	}
	res.RSS = &RSS{PID: o.RSSPID, BeforeBytes: before, AfterBytes: after, PeakBytes: max(r.rssPeak.Load(), after)}
	if res.Connected > 0 {
		res.RSS.PerConnBytes = float64(after-before) / float64(res.Connected)
	}
	cpu := cpuAfter - mark.rss
	res.RSS.CPUSeconds = cpu.Seconds()
	res.RSS.CPUPerStateChangeUs, res.RSS.CPUPerFrameUs = perStateChangeAndFrame(res, cpu)
	return nil
}
