package loadgen

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// readCPUs reads the CPU time of every pid (see readCPU).
func readCPUs(pids []int) ([]time.Duration, error) {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		v, err := readCPU(pid)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// processName is /proc/<pid>/comm ("" when unreadable).
func processName(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// loadAvg returns /proc/loadavg's first three fields ("" when unreadable).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
