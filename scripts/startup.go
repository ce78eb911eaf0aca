//go:build ignore

// startup measures a daemon's start and idle footprint: it starts
// `BINARY serve` on a fresh data directory N times (with -existing, N times
// on one data directory a first start made) and reports, as medians, the
// time from exec to the first 200 of GET /v1/health, and the VmRSS of the
// daemon 1 s after its start. serve --log-level debug logs where the time
// of a start goes ("start-up trace").
//
//	go run scripts/startup.go [-n 15] [-existing] BINARY
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
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
		if _, _, err := once(flag.Arg(0), dir, false); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	var starts []time.Duration
	var rss []int
	for range *n {
		s, r, err := once(flag.Arg(0), dir, true)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		starts = append(starts, s)
		rss = append(rss, r)
	}
	slices.Sort(starts)
	slices.Sort(rss)
	fmt.Printf("start -> first healthy: median %.2f ms (min %.2f, max %.2f)\n",
		ms(starts[len(starts)/2]), ms(starts[0]), ms(starts[len(starts)-1]))
	fmt.Printf("idle RSS 1 s after start: median %.1f MiB (min %.1f, max %.1f)\n",
		kib(rss[len(rss)/2]), kib(rss[0]), kib(rss[len(rss)-1]))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func kib(k int) float64          { return float64(k) / 1024 }

// once starts bin on dir (a new directory when ""), and measures when
// idle asks for the RSS.
func once(bin, dir string, idle bool) (time.Duration, int, error) {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "startup-"); err != nil {
			return 0, 0, err
		}
		defer os.RemoveAll(dir)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--data-dir", dir, "--insecure-no-auth", "--listen", addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	var start time.Duration
	for {
		if time.Since(t0) > 10*time.Second {
			return 0, 0, fmt.Errorf("%s: not healthy after 10 s", bin)
		}
		resp, err := client.Get("http://" + addr + "/v1/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				start = time.Since(t0)
				break
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	if !idle {
		return start, 0, nil
	}
	time.Sleep(time.Until(t0.Add(time.Second)))
	r, err := vmRSS(cmd.Process.Pid)
	return start, r, err
}

// vmRSS is the process's VmRSS in KiB.
func vmRSS(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}
