package clusterenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killTimeout bounds how long Kill waits for a SIGKILLed process to be
// reaped.
const killTimeout = 10 * time.Second

// findBinary returns the path of the executable name, looked up in PATH and
// then at each fallback path in order. The error names the apt package that
// provides it.
func findBinary(name, aptPackage string, fallbacks ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, p := range fallbacks {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH nor at %s: install it with `apt-get install %s`",
		name, strings.Join(fallbacks, ", "), aptPackage)
}

// process is one server process started in its own process group, with
// stdout and stderr appended to a log file.
type process struct {
	name    string // for messages, e.g. "redis node 1 (127.0.0.1:40001)"
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // cmd.Wait's result; read only after done is closed
}

// startProcess starts bin with args in a new process group, appending its
// output to logPath. It returns once the process is started (not ready).
func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log file for %s: %w", name, err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = newSysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s %s): %w", name, bin, strings.Join(args, " "), err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id (also the process group id).
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process group and waits, up to killTimeout, until
// the process has been reaped. Killing an exited process is a no-op.
func (p *process) kill() error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(-p.pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL process group %d of %s: %w", p.pid(), p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("%s (pid %d) still running %s after SIGKILL", p.name, p.pid(), killTimeout)
	}
}

// exitReport describes how the process ended plus the tail of its log; only
// meaningful after exited() is true.
func (p *process) exitReport() string {
	return fmt.Sprintf("%s exited (%v); log tail:\n%s", p.name, p.waitErr, p.logTail(4096))
}

// logTail returns up to max bytes from the end of the process's log file.
func (p *process) logTail(max int64) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log %s: %v)", p.logPath, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot stat log %s: %v)", p.logPath, err)
	}
	off := fi.Size() - max
	if off < 0 {
		off = 0
	}
	buf := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(buf, off)
	return string(buf[:n])
}

// addr returns "127.0.0.1:port".
func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
