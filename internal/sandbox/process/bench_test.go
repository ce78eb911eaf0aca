package process

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
)

// reportMedian adds the median of durations as a metric: the goals are
// medians (cold ≤ 8 ms, warm ≤ 1 ms), and ns/op is a mean.
func reportMedian(b *testing.B, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	if len(d) > 0 {
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "median-ms")
	}
}

// BenchmarkColdTrue is Create + Start + Wait of /bin/true (+ Close, not
// timed: it happens after the result is known), with a spare init as the
// daemon runs the runtime (Options.Spares 1): the spare taken by one
// Create is replaced in the background while the next runs.
// BenchmarkNoSpareColdTrue is the same without spares, for comparison in
// the same run.
func BenchmarkColdTrue(b *testing.B) { benchColdTrue(b, 1) }

// BenchmarkNoSpareColdTrue: BenchmarkColdTrue without spares.
func BenchmarkNoSpareColdTrue(b *testing.B) { benchColdTrue(b, 0) }

func benchColdTrue(b *testing.B, spares int) {
	needRoot(b)
	rt := New(Options{Spares: spares})
	b.Cleanup(func() { _ = rt.Close() })
	spec := baseSpec(b)
	ctx := context.Background()
	var d []time.Duration
	fromSpare := 0
	for b.Loop() {
		t0 := time.Now()
		sb, err := rt.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		p, err := sb.Start(ctx, sandbox.Cmd{Args: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		if e, _ := p.Wait(); e.Code != 0 {
			b.Fatalf("true: %+v", e)
		}
		d = append(d, time.Since(t0))
		b.StopTimer()
		if sb.(*box).spare {
			fromSpare++
		}
		sb.Close(ctx)
		b.StartTimer()
	}
	reportMedian(b, d)
	b.ReportMetric(float64(fromSpare)/float64(len(d)), "spare/op")
}

// BenchmarkWarmTrue is Start + Wait of /bin/true in a pre-created sandbox.
func BenchmarkWarmTrue(b *testing.B) {
	sb, _ := newBox(b, nil)
	ctx := context.Background()
	var d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		p, err := sb.Start(ctx, sandbox.Cmd{Args: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		if e, _ := p.Wait(); e.Code != 0 {
			b.Fatalf("true: %+v", e)
		}
		d = append(d, time.Since(t0))
	}
	reportMedian(b, d)
}

// benchClient times HTTP/1.1 GETs: mode "new" opens a connection per
// request, "keepalive" reuses one. It prints the median and the mean in
// nanoseconds.
const benchClient = `
import socket, sys, time
mode, n, host, port, target = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
req = ("GET %s HTTP/1.1\r\nHost: bench\r\n\r\n" % target).encode()
def response(f):
    status = f.readline().split()[1]
    n = 0
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        if h.lower().startswith(b"content-length:"):
            n = int(h.split(b":")[1])
    f.read(n)
    return status
ds, s, f = [], None, None
for i in range(n):
    t0 = time.perf_counter_ns()
    if s is None:
        s = socket.create_connection((host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = s.makefile("rb")
    s.sendall(req)
    if response(f) != b"200":
        sys.exit("bad status")
    if mode == "new":
        f.close(); s.close(); s = None
    ds.append(time.perf_counter_ns() - t0)
ds.sort()
print(ds[len(ds) // 2], sum(ds) // len(ds))
`

// BenchmarkEgressRequest measures what the egress proxy adds to a plain
// HTTP request, in one run: the same client times b.N requests to a host
// server directly from the host, then from inside a sandbox through the
// proxy (the init's hand-over of the connection, the gate's decision, its
// connection upstream). The goal is at most 0.5 ms added per request.
func BenchmarkEgressRequest(b *testing.B) {
	needRoot(b)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	sb, spec := newBox(b, func(s *sandbox.Spec) {
		s.ReadOutsideWorkspace = true
		// A new connection per request, as fast as they come: past the
		// default connection rate.
		s.Network = sandbox.Network{Mode: sandbox.NetworkProxy, Allow: []string{"127.0.0.1:" + strconv.Itoa(port)}, MaxConnectionRate: 1 << 30}
	})
	eg, err := egress.New(egress.Options{})
	if err != nil {
		b.Fatal(err)
	}
	g, err := eg.Attach(sb, egress.Config{Network: spec.Network})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	for _, mode := range []string{"new", "keepalive"} {
		b.Run(mode, func(b *testing.B) {
			n := strconv.Itoa(max(b.N, 20))
			out, err := exec.Command("python3", "-c", benchClient, mode, n, "127.0.0.1", strconv.Itoa(port), "/").Output()
			if err != nil {
				b.Fatalf("direct client: %v", err)
			}
			direct := parseBench(b, string(out))
			var buf bytes.Buffer
			e, _, errs := run(b, sb, sandbox.Cmd{Args: []string{"python3", "-c", benchClient, mode, n, "127.0.0.1", "3128",
				"http://127.0.0.1:" + strconv.Itoa(port) + "/"}, Stdout: &buf})
			if e.Code != 0 {
				b.Fatalf("client in the sandbox: %+v %s", e, errs)
			}
			proxied := parseBench(b, buf.String())
			b.ReportMetric(float64(direct[0])/1e3, "direct-median-us")
			b.ReportMetric(float64(proxied[0])/1e3, "proxy-median-us")
			b.ReportMetric(float64(proxied[0]-direct[0])/1e3, "added-median-us")
			b.ReportMetric(float64(proxied[1]-direct[1])/1e3, "added-mean-us")
		})
	}
}

// parseBench reads the client's "median mean" line.
func parseBench(b *testing.B, out string) [2]int64 {
	var r [2]int64
	if _, err := fmt.Sscan(strings.TrimSpace(out), &r[0], &r[1]); err != nil {
		b.Fatalf("bench client printed %q: %v", out, err)
	}
	return r
}
