package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchTarget is a daemon the daemon benchmarks measure side by side: ours
// (the binary AGENTBOX_BENCH_BINARY names, scripts/bench passes the
// scripts/build one; else the test's build) and, when AGENTBOX_BENCH_PEER
// names its binary, the peer (rivet-dev sandbox-agent, the closest
// comparable daemon; scripts/bench installs it pinned). Each runs with its
// defaults: only what the benchmark needs (address, data dir, no token for
// the peer, whose default is no token anyway) is set.
type benchTarget struct {
	name string
	path string
	env  []string
	args func(port int, dir string) []string
}

func benchTargets(b *testing.B) []benchTarget {
	b.Helper()
	ours := binary
	if p := os.Getenv("AGENTBOX_BENCH_BINARY"); p != "" {
		ours = p
	}
	ts := []benchTarget{{name: "agentbox", path: ours, args: func(port int, dir string) []string {
		return []string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", dir}
	}}}
	if p := os.Getenv("AGENTBOX_BENCH_PEER"); p != "" {
		peer := func(port int, _ string) []string {
			return []string{"server", "--no-token", "--no-telemetry", "--host", "127.0.0.1", "--port", strconv.Itoa(port)}
		}
		ts = append(ts, benchTarget{name: "peer", path: p, args: peer},
			// Its per-request HTTP log to a file off: the peer at its fastest.
			benchTarget{name: "peer-nolog", path: p, args: peer, env: []string{"SANDBOX_AGENT_LOG_HTTP=0"}})
	}
	return ts
}

func (t benchTarget) command(port int, dir string) *exec.Cmd {
	cmd := exec.Command(t.path, t.args(port, dir)...)
	cmd.Env = append([]string{"HOME=" + dir, "PATH=/usr/bin:/bin"}, t.env...)
	return cmd
}

// BenchmarkStartToHealthy measures, for each target, the time from exec of
// the daemon to its first 200 from GET /v1/health (polled every 200 µs by
// the same client), and its idle RSS one second after that (the median
// over the iterations), as the peer's were measured.
func BenchmarkStartToHealthy(b *testing.B) {
	for _, t := range benchTargets(b) {
		b.Run(t.name, func(b *testing.B) { benchStartToHealthy(b, t) })
	}
}

func benchStartToHealthy(b *testing.B, t benchTarget) {
	var rss []int64
	var times []time.Duration
	// A restart on an existing data dir, the usual case: the first start
	// (which creates the database) is not measured.
	dir := b.TempDir()
	startServe(b, t, dir).stop()
	for b.Loop() {
		port := freePortB(b)
		url := fmt.Sprintf("http://127.0.0.1:%d/v1/health", port)
		cmd := t.command(port, dir)
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		hc := &http.Client{Timeout: time.Second}
		for {
			resp, err := hc.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Since(start) > 10*time.Second {
				b.Fatalf("%s not healthy in 10s", t.name)
			}
			time.Sleep(200 * time.Microsecond)
		}
		times = append(times, time.Since(start))
		b.StopTimer()
		time.Sleep(time.Second)
		rss = append(rss, vmRSS(b, cmd.Process.Pid))
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Process.Signal(syscall.SIGTERM) // the peer shuts down on SIGTERM, and may hang on SIGINT
		_ = cmd.Wait()
		b.StartTimer()
	}
	slices.Sort(times)
	slices.Sort(rss)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(rss[len(rss)/2]), "idle-rss-KB")
}

// BenchmarkHealth measures GET /v1/health over a kept-alive connection, for
// each target with the same client and the same number of requests, once
// the daemon is idle. scripts/bench runs it several times, so that the
// targets alternate and a ratio compares figures of one run. "gofloor" is
// testdata/healthfloor, a plain net/http server answering the same JSON,
// built like the daemon: ours above it is what the daemon adds; the floor
// above the peer is Go's net/http and scheduler on this machine.
func BenchmarkHealth(b *testing.B) {
	ts := benchTargets(b)
	ts = append(ts[:1:1], append([]benchTarget{healthFloor(b)}, ts[1:]...)...)
	for _, t := range ts {
		b.Run(t.name, func(b *testing.B) { benchHealth(b, t) })
	}
}

// healthFloor builds testdata/healthfloor as scripts/build builds the
// daemon (static, its tags, stripped).
func healthFloor(b *testing.B) benchTarget {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "healthfloor")
	tags, err := exec.Command("../../scripts/build", "--print-tags").Output()
	if err != nil {
		b.Fatalf("scripts/build --print-tags: %v", err)
	}
	build := exec.Command("go", "build", "-trimpath", "-tags", strings.TrimSpace(string(tags)), "-ldflags", "-s -w", "-o", bin, "./testdata/healthfloor")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building testdata/healthfloor: %v\n%s", err, out)
	}
	return benchTarget{name: "gofloor", path: bin, args: func(port int, _ string) []string {
		return []string{"--listen", fmt.Sprintf("127.0.0.1:%d", port)}
	}}
}

func benchHealth(b *testing.B, t benchTarget) {
	srv := startServe(b, t, b.TempDir())
	defer srv.stop()
	// Past start-up work done in the background (ours probes the sandbox
	// runtimes, which runs helpers and runsc): requests are timed on an
	// idle daemon.
	waitIdle(b, srv.cmd.Process.Pid)
	hc := &http.Client{}
	ctx := context.Background()
	var lat []time.Duration
	pid := srv.cmd.Process.Pid
	cpu0, cs0 := threadsCPU(pid)
	for b.Loop() {
		t0 := time.Now()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.url, nil)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var buf [512]byte
		for {
			if _, err := resp.Body.Read(buf[:]); err != nil {
				break
			}
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: GET /v1/health: %s", t.name, resp.Status)
		}
		lat = append(lat, time.Since(t0))
	}
	// What serving took the server, per request: its threads' CPU time
	// and context switches (the client's are not counted). The mechanism
	// behind the latency: Go's net/http starts a goroutine per request,
	// whose wake-up of an idle P costs more than the request's own work
	// (docs/ARCHITECTURE.md, the health figures).
	cpu1, cs1 := threadsCPU(pid)
	n := float64(len(lat))
	b.ReportMetric(float64(cpu1-cpu0)/1000/n, "server-cpu-us/op")
	b.ReportMetric(float64(cs1-cs0)/n, "server-ctxsw/op")
	// The resident set once the requests have been served: what the
	// daemon's own work keeps mapped, beside the idle figure of
	// BenchmarkStartToHealthy.
	b.ReportMetric(float64(vmRSS(b, srv.cmd.Process.Pid)), "rss-after-KB")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1000, "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1000, "p99-us")
}

func freePortB(b *testing.B) int { return freePort(b) }

// threadsCPU returns the CPU time (ns, from schedstat) and the context
// switches (voluntary and not) of process pid's live threads so far.
func threadsCPU(pid int) (cpuNS, switches int64) {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, t.Name())
		if st, err := os.ReadFile(dir + "schedstat"); err == nil {
			if f := strings.Fields(string(st)); len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				cpuNS += v
			}
		}
		status, _ := os.ReadFile(dir + "status")
		for line := range strings.Lines(string(status)) {
			k, v, ok := strings.Cut(line, ":")
			if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				switches += x
			}
		}
	}
	return cpuNS, switches
}

func vmRSS(b *testing.B, pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// waitIdle waits until process pid and its descendants used no CPU for
// 200 ms, for at most 20 s.
func waitIdle(b *testing.B, pid int) {
	b.Helper()
	deadline := time.Now().Add(20 * time.Second)
	last := int64(-1)
	for time.Now().Before(deadline) {
		cpu := treeCPU(pid, true)
		if cpu == last {
			return
		}
		last = cpu
		time.Sleep(200 * time.Millisecond)
	}
	b.Logf("process %d still busy after 20 s; measuring anyway", pid)
}

// treeCPU returns the CPU ticks process pid and its live descendants used
// so far, with (top) what its exited children used.
func treeCPU(pid int, top bool) int64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis: utime, stime,
	// cutime and cstime are fields 14 to 17 of the line.
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
	n := 2
	if top {
		n = 4
	}
	var sum int64
	for _, v := range f[11 : 11+n] {
		x, _ := strconv.ParseInt(v, 10, 64)
		sum += x
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, kid := range strings.Fields(string(c)) {
			if k, err := strconv.Atoi(kid); err == nil {
				sum += treeCPU(k, false)
			}
		}
	}
	return sum
}

type served struct {
	cmd *exec.Cmd
	url string // its GET /v1/health
}

func (s served) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// startServe starts t on dir and waits until it is healthy.
func startServe(b *testing.B, t benchTarget, dir string) served {
	b.Helper()
	port := freePortB(b)
	cmd := t.command(port, dir)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/health", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return served{cmd, url}
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			b.Fatalf("%s: %v", t.name, err)
		}
		time.Sleep(time.Millisecond)
	}
}
