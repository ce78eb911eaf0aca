package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkStartToHealthy measures the time from exec of `agentbox serve` to
// its first 200 from GET /v1/health, and the daemon's idle RSS one second
// after that (reported on the last iteration).
func BenchmarkStartToHealthy(b *testing.B) {
	var rssKB int64
	var times []time.Duration
	// A restart on an existing data dir, the usual case: the first start
	// (which creates the database) is not measured.
	dir := b.TempDir()
	startServe(b, dir).stop()
	for b.Loop() {
		port := freePortB(b)
		url := fmt.Sprintf("http://127.0.0.1:%d/v1/health", port)
		cmd := exec.Command(binary, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", dir, "--log-level", "warn")
		cmd.Env = []string{"HOME=" + dir}
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
				b.Fatal("daemon not healthy in 10s")
			}
			time.Sleep(200 * time.Microsecond)
		}
		times = append(times, time.Since(start))
		b.StopTimer()
		time.Sleep(time.Second)
		rssKB = vmRSS(b, cmd.Process.Pid)
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		b.StartTimer()
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(rssKB), "idle-rss-KB")
}

// BenchmarkHealth measures GET /v1/health over a kept-alive connection.
func BenchmarkHealth(b *testing.B) {
	dir := b.TempDir()
	port := freePortB(b)
	cmd := exec.Command(binary, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", dir, "--log-level", "warn")
	cmd.Env = []string{"HOME=" + dir}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/health", port)
	hc := &http.Client{}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
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
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
}

func freePortB(b *testing.B) int { return freePort(b) }

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

type served struct{ cmd *exec.Cmd }

func (s served) stop() { _ = s.cmd.Process.Signal(os.Interrupt); _ = s.cmd.Wait() }

// startServe starts a daemon on dir and waits until it is healthy.
func startServe(b *testing.B, dir string) served {
	b.Helper()
	port := freePortB(b)
	cmd := exec.Command(binary, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", dir, "--log-level", "warn")
	cmd.Env = []string{"HOME=" + dir}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/health", port))
		if err == nil {
			resp.Body.Close()
			return served{cmd}
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}
