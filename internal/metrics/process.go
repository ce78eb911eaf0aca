package metrics

import (
	"bytes"
	"math"
	"os"
	"strconv"
	"strings"
)

var (
	procCPU      = desc{name: "process_cpu_seconds_total", typ: "counter", help: "Total user and system CPU time spent in seconds."}
	procMaxFDs   = desc{name: "process_max_fds", typ: "gauge", help: "Maximum number of open file descriptors."}
	procRecv     = desc{name: "process_network_receive_bytes_total", typ: "counter", help: "Number of bytes received by the process over the network."}
	procSent     = desc{name: "process_network_transmit_bytes_total", typ: "counter", help: "Number of bytes sent by the process over the network."}
	procOpenFDs  = desc{name: "process_open_fds", typ: "gauge", help: "Number of open file descriptors."}
	procRSS      = desc{name: "process_resident_memory_bytes", typ: "gauge", help: "Resident memory size in bytes."}
	procStart    = desc{name: "process_start_time_seconds", typ: "gauge", help: "Start time of the process since unix epoch in seconds."}
	procVSize    = desc{name: "process_virtual_memory_bytes", typ: "gauge", help: "Virtual memory size in bytes."}
	procMaxVSize = desc{name: "process_virtual_memory_max_bytes", typ: "gauge", help: "Maximum amount of virtual memory available in bytes."}
)

// userHZ is the kernel's clock tick for /proc/PID/stat's times (USER_HZ,
// 100 on every Linux ABI; Prometheus's procfs assumes the same).
const userHZ = 100

// processCollector reports the process_* metrics from /proc/self, as
// Prometheus's process collector does on Linux. A file it cannot read (no
// /proc, another OS) leaves its metrics out.
type processCollector struct{ proc string }

// NewProcessCollector returns the collector of this process's process_*
// metrics.
func NewProcessCollector() Collector { return processCollector{proc: "/proc"} }

func (processCollector) names() []string {
	return []string{procCPU.name, procMaxFDs.name, procRecv.name, procSent.name, procOpenFDs.name, procRSS.name, procStart.name, procVSize.name, procMaxVSize.name}
}

func (c processCollector) collect(emit func(family)) {
	one := func(d *desc, v float64) { emit(family{desc: d, samples: []sample{{value: v}}}) }
	if st, ok := c.stat(); ok {
		one(&procCPU, float64(st.utime+st.stime)/userHZ)
		one(&procVSize, float64(st.vsize))
		one(&procRSS, float64(st.rss*int64(os.Getpagesize())))
		if bt, ok := c.bootTime(); ok {
			one(&procStart, float64(bt)+float64(st.start)/userHZ)
		}
	}
	if ents, err := os.ReadDir(c.proc + "/self/fd"); err == nil {
		one(&procOpenFDs, float64(len(ents)))
	}
	if files, space, ok := c.limits(); ok {
		one(&procMaxFDs, files)
		one(&procMaxVSize, space)
	}
	if in, out, ok := c.netstat(); ok {
		one(&procRecv, in)
		one(&procSent, out)
	}
}

type procStat struct {
	utime, stime, start uint64
	vsize               uint64
	rss                 int64
}

// stat parses /proc/self/stat: the fields after the command name, which
// is in parentheses and may itself hold spaces and parentheses.
func (c processCollector) stat() (procStat, bool) {
	b, err := os.ReadFile(c.proc + "/self/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	// f[0] is field 3 (state): field n is f[n-3].
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 22 {
		return procStat{}, false
	}
	u := func(n int) uint64 { v, _ := strconv.ParseUint(f[n-3], 10, 64); return v }
	rss, _ := strconv.ParseInt(f[24-3], 10, 64)
	return procStat{utime: u(14), stime: u(15), start: u(22), vsize: u(23), rss: rss}, true
}

// bootTime is /proc/stat's btime: the boot time in seconds since the epoch.
func (c processCollector) bootTime() (uint64, bool) {
	b, err := os.ReadFile(c.proc + "/stat")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// limits returns the soft limits on open files and address space from
// /proc/self/limits ("unlimited" as the largest uint64, as Prometheus's
// procfs reports it).
func (c processCollector) limits() (files, space float64, ok bool) {
	b, err := os.ReadFile(c.proc + "/self/limits")
	if err != nil {
		return 0, 0, false
	}
	soft := func(line, name string) (float64, bool) {
		rest, found := strings.CutPrefix(line, name)
		if !found {
			return 0, false
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		if f[0] == "unlimited" {
			return math.MaxUint64, true
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		return float64(v), err == nil
	}
	var haveFiles, haveSpace bool
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, found := soft(line, "Max open files"); found {
			files, haveFiles = v, true
		}
		if v, found := soft(line, "Max address space"); found {
			space, haveSpace = v, true
		}
	}
	return files, space, haveFiles && haveSpace
}

// netstat returns IpExt's InOctets and OutOctets from
// /proc/self/net/netstat: the bytes of the process's network namespace.
func (c processCollector) netstat() (in, out float64, ok bool) {
	b, err := os.ReadFile(c.proc + "/self/net/netstat")
	if err != nil {
		return 0, 0, false
	}
	var header []string
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, found := strings.CutPrefix(line, "IpExt:")
		if !found {
			continue
		}
		if header == nil {
			header = strings.Fields(rest)
			continue
		}
		for i, v := range strings.Fields(rest) {
			if i >= len(header) {
				break
			}
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			switch header[i] {
			case "InOctets":
				in = n
			case "OutOctets":
				out = n
			}
		}
		return in, out, true
	}
	return 0, 0, false
}
