//go:build ignore

// startup measures a daemon's start and idle footprint: it starts
// `BINARY serve` on a fresh data directory N times (with -existing, N times
// on one data directory a first start made) and reports, as medians, the
// time from exec to the first 200 of GET /v1/health, the CPU time the
// daemon's threads ran until then (from /proc/PID/task/*/schedstat: unlike
// the time, it hardly depends on the machine's load) and the page faults it
// took until then (from /proc/PID/stat: the kernel counts there, besides
// the faults, the pages madvise(MADV_POPULATE_*) maps, one per 64 KiB of
// the executable and one per page of the heap; internal/prefault), the
// daemon's own figure of its start from main to serving (the "start" of
// its "agentbox serving" line; what comes before is the runtime's start and
// the package inits), and the daemon's
// memory 1 s after its start: VmRSS, split into RssAnon and RssFile (the
// binary's pages), and its Pss. serve --log-level debug logs where the time
// of a start goes ("start-up trace").
//
//	go run scripts/startup.go [-n 15] [-existing] BINARY
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", 15, "runs")
	existing := flag.Bool("existing", false, "start on one data directory that a first start made, not on a fresh one each time")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: go run scripts/startup.go [-n N] [-existing] BINARY")
		os.Exit(2)
	}
	dir := ""
	if *existing {
		var err error
		if dir, err = os.MkdirTemp("", "startup-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
		if _, err := once(flag.Arg(0), dir, false); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	var starts, cpus, mains []time.Duration
	var faults []int
	var mems []memory
	for range *n {
		r, err := once(flag.Arg(0), dir, true)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		starts = append(starts, r.start)
		cpus = append(cpus, r.cpu)
		mains = append(mains, r.main)
		faults = append(faults, r.faults)
		mems = append(mems, r.mem)
	}
	for _, d := range []struct {
		name string
		v    []time.Duration
	}{{"start -> first healthy", starts}, {"CPU until first healthy", cpus}, {"  main -> serving (the daemon's log)", mains}} {
		slices.Sort(d.v)
		fmt.Printf("%s: median %.2f ms (min %.2f, max %.2f)\n", d.name,
			ms(d.v[len(d.v)/2]), ms(d.v[0]), ms(d.v[len(d.v)-1]))
	}
	slices.Sort(faults)
	fmt.Printf("page faults until first healthy: median %d (min %d, max %d)\n", faults[len(faults)/2], faults[0], faults[len(faults)-1])
	for _, m := range []struct {
		name string
		kb   func(memory) int
	}{
		{"idle RSS 1 s after start", func(m memory) int { return m.rss }},
		{"  of which RssAnon", func(m memory) int { return m.anon }},
		{"  of which RssFile", func(m memory) int { return m.file }},
		{"idle Pss 1 s after start", func(m memory) int { return m.pss }},
	} {
		v := make([]int, len(mems))
		for i := range mems {
			v[i] = m.kb(mems[i])
		}
		slices.Sort(v)
		fmt.Printf("%s: median %.1f MiB (min %.1f, max %.1f)\n", m.name, kib(v[len(v)/2]), kib(v[0]), kib(v[len(v)-1]))
	}
}

// result is what once measures.
type result struct {
	start, cpu time.Duration
	main       time.Duration // main to serving, as the daemon logs it
	faults     int           // minor and major page faults
	mem        memory
}

// memory is a process's memory in KiB.
type memory struct{ rss, anon, file, pss int }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func kib(k int) float64          { return float64(k) / 1024 }

// once starts bin on dir (a new directory when ""), and measures the
// memory when idle asks for it.
func once(bin, dir string, idle bool) (result, error) {
	var r result
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "startup-"); err != nil {
			return r, err
		}
		defer os.RemoveAll(dir)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--data-dir", dir, "--insecure-no-auth", "--listen", addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var log syncBuffer
	cmd.Stderr = &log
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	for {
		if time.Since(t0) > 10*time.Second {
			return r, fmt.Errorf("%s: not healthy after 10 s", bin)
		}
		resp, err := client.Get("http://" + addr + "/v1/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				r.start = time.Since(t0)
				break
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	r.cpu = onCPU(cmd.Process.Pid)
	r.faults = pageFaults(cmd.Process.Pid)
	if !idle {
		return r, nil
	}
	time.Sleep(time.Until(t0.Add(time.Second)))
	r.mem, err = memoryOf(cmd.Process.Pid)
	r.main = serving(log.String())
	return r, err
}

// syncBuffer is a bytes.Buffer the daemon's output goes to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// serving is the start (main to serving) of the daemon's "agentbox
// serving" line in log; 0 if there is none.
func serving(log string) time.Duration {
	for line := range strings.Lines(log) {
		if !strings.Contains(line, "agentbox serving") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "start="); ok {
				d, _ := time.ParseDuration(v)
				return d
			}
		}
	}
	return 0
}

// onCPU is the time the threads of process pid ran so far (those that
// exited are not counted: the daemon's all live at start).
func onCPU(pid int) time.Duration {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			ns += v
		}
	}
	return time.Duration(ns)
}

// pageFaults is the number of page faults (minor and major) process pid
// took so far, from /proc/PID/stat.
func pageFaults(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// The fields after the command's ")": state is the first, minflt
	// the 8th and majflt the 10th.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 10 {
		return 0
	}
	minflt, _ := strconv.Atoi(f[7])
	majflt, _ := strconv.Atoi(f[9])
	return minflt + majflt
}

// memoryOf reads process pid's VmRSS, RssAnon and RssFile (status) and
// Pss (smaps_rollup).
func memoryOf(pid int) (memory, error) {
	var m memory
	fields := map[string]*int{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "RssFile:": &m.file, "Pss:": &m.pss}
	for _, name := range []string{"status", "smaps_rollup"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			return m, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			f := strings.Fields(sc.Text()) // "Name:", value, "kB"
			if p, ok := fields[f[0]]; ok && *p == 0 && len(f) > 1 {
				*p, _ = strconv.Atoi(f[1])
			}
		}
		f.Close()
	}
	if m.rss == 0 {
		return m, fmt.Errorf("no VmRSS for %d", pid)
	}
	return m, nil
}
