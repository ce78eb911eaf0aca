package metrics

import (
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"time"
)

// The runtime/metrics samples the go_* metrics are computed from.
const (
	rmTinyAllocs = iota
	rmAllocsObjects
	rmFreesObjects
	rmAllocsBytes
	rmHeapObjects
	rmHeapGoal
	rmTotal
	rmHeapObjectsBytes
	rmHeapUnused
	rmHeapReleased
	rmHeapFree
	rmHeapStacks
	rmOSStacks
	rmMSpanInuse
	rmMSpanFree
	rmMCacheInuse
	rmMCacheFree
	rmProfBuckets
	rmMetadataOther
	rmOther
	rmGOGC
	rmMemLimit
	rmGOMAXPROCS
	rmCount
)

var rmNames = [rmCount]string{
	rmTinyAllocs:       "/gc/heap/tiny/allocs:objects",
	rmAllocsObjects:    "/gc/heap/allocs:objects",
	rmFreesObjects:     "/gc/heap/frees:objects",
	rmAllocsBytes:      "/gc/heap/allocs:bytes",
	rmHeapObjects:      "/gc/heap/objects:objects",
	rmHeapGoal:         "/gc/heap/goal:bytes",
	rmTotal:            "/memory/classes/total:bytes",
	rmHeapObjectsBytes: "/memory/classes/heap/objects:bytes",
	rmHeapUnused:       "/memory/classes/heap/unused:bytes",
	rmHeapReleased:     "/memory/classes/heap/released:bytes",
	rmHeapFree:         "/memory/classes/heap/free:bytes",
	rmHeapStacks:       "/memory/classes/heap/stacks:bytes",
	rmOSStacks:         "/memory/classes/os-stacks:bytes",
	rmMSpanInuse:       "/memory/classes/metadata/mspan/inuse:bytes",
	rmMSpanFree:        "/memory/classes/metadata/mspan/free:bytes",
	rmMCacheInuse:      "/memory/classes/metadata/mcache/inuse:bytes",
	rmMCacheFree:       "/memory/classes/metadata/mcache/free:bytes",
	rmProfBuckets:      "/memory/classes/profiling/buckets:bytes",
	rmMetadataOther:    "/memory/classes/metadata/other:bytes",
	rmOther:            "/memory/classes/other:bytes",
	rmGOGC:             "/gc/gogc:percent",
	rmMemLimit:         "/gc/gomemlimit:bytes",
	rmGOMAXPROCS:       "/sched/gomaxprocs:threads",
}

// rm is one read of the samples: v(i) is sample i as a float (0 when the
// runtime does not know it).
type rm [rmCount]rtmetrics.Sample

func (r *rm) v(i int) float64 {
	switch s := r[i].Value; s.Kind() {
	case rtmetrics.KindUint64:
		return float64(s.Uint64())
	case rtmetrics.KindFloat64:
		return s.Float64()
	}
	return 0
}

func (r *rm) sum(is ...int) float64 {
	var t float64
	for _, i := range is {
		t += r.v(i)
	}
	return t
}

// goMetric is one of the go_* gauges and counters, computed from a read.
type goMetric struct {
	desc
	value func(*rm) float64
}

// goMetrics are the go_* metrics Prometheus's Go collector reports by
// default, with its names, HELP texts and the same definitions (the
// go_memstats_* ones as its collector computes them from runtime/metrics).
var goMetrics = sync.OnceValue(func() []goMetric {
	g := func(name, typ, help string, value func(*rm) float64) goMetric {
		return goMetric{desc: newDesc(name, help, typ, nil), value: value}
	}
	ms := func(name, typ, help string, value func(*rm) float64) goMetric {
		return g("go_memstats_"+name, typ, help, value)
	}
	one := func(i int) func(*rm) float64 { return func(r *rm) float64 { return r.v(i) } }
	heapInuse := func(r *rm) float64 { return r.sum(rmHeapObjectsBytes, rmHeapUnused) }
	heapIdle := func(r *rm) float64 { return r.sum(rmHeapReleased, rmHeapFree) }
	return []goMetric{
		g("go_gc_gogc_percent", "gauge", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", one(rmGOGC)),
		g("go_gc_gomemlimit_bytes", "gauge", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.", one(rmMemLimit)),
		g("go_goroutines", "gauge", "Number of goroutines that currently exist.", func(*rm) float64 { return float64(runtime.NumGoroutine()) }),
		ms("alloc_bytes", "gauge", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", one(rmHeapObjectsBytes)),
		ms("alloc_bytes_total", "counter", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", one(rmAllocsBytes)),
		ms("buck_hash_sys_bytes", "gauge", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", one(rmProfBuckets)),
		ms("frees_total", "counter", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", func(r *rm) float64 { return r.sum(rmFreesObjects, rmTinyAllocs) }),
		ms("gc_sys_bytes", "gauge", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", one(rmMetadataOther)),
		ms("heap_alloc_bytes", "gauge", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", one(rmHeapObjectsBytes)),
		ms("heap_idle_bytes", "gauge", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", heapIdle),
		ms("heap_inuse_bytes", "gauge", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", heapInuse),
		ms("heap_objects", "gauge", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", one(rmHeapObjects)),
		ms("heap_released_bytes", "gauge", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", one(rmHeapReleased)),
		ms("heap_sys_bytes", "gauge", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", func(r *rm) float64 { return heapInuse(r) + heapIdle(r) }),
		ms("mallocs_total", "counter", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", func(r *rm) float64 { return r.sum(rmAllocsObjects, rmTinyAllocs) }),
		ms("mcache_inuse_bytes", "gauge", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", one(rmMCacheInuse)),
		ms("mcache_sys_bytes", "gauge", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", func(r *rm) float64 { return r.sum(rmMCacheInuse, rmMCacheFree) }),
		ms("mspan_inuse_bytes", "gauge", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", one(rmMSpanInuse)),
		ms("mspan_sys_bytes", "gauge", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", func(r *rm) float64 { return r.sum(rmMSpanInuse, rmMSpanFree) }),
		ms("next_gc_bytes", "gauge", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", one(rmHeapGoal)),
		ms("other_sys_bytes", "gauge", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", one(rmOther)),
		ms("stack_inuse_bytes", "gauge", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", one(rmHeapStacks)),
		ms("stack_sys_bytes", "gauge", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", func(r *rm) float64 { return r.sum(rmHeapStacks, rmOSStacks) }),
		ms("sys_bytes", "gauge", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", one(rmTotal)),
		g("go_sched_gomaxprocs_threads", "gauge", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.", one(rmGOMAXPROCS)),
		g("go_threads", "gauge", "Number of OS threads created.", func(*rm) float64 { n, _ := runtime.ThreadCreateProfile(nil); return float64(n) }),
	}
})

var (
	goGCDesc     = desc{name: "go_gc_duration_seconds", typ: "summary", help: "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles."}
	goLastGCDesc = desc{name: "go_memstats_last_gc_time_seconds", typ: "gauge", help: "Number of seconds since 1970 of last garbage collection."}
	goInfoDesc   = desc{name: "go_info", typ: "gauge", help: "Information about the Go environment."}
)

// goCollector reports the go_* metrics. Its descriptions and sample
// buffer are built on the first scrape, not at start.
type goCollector struct{}

// NewGoCollector returns the collector of the Go runtime's metrics: the
// go_* metrics Prometheus's Go collector reports by default, with the
// same names, types and HELP.
func NewGoCollector() Collector { return &goCollector{} }

func (c *goCollector) names() []string {
	ns := []string{goGCDesc.name, goLastGCDesc.name, goInfoDesc.name}
	for _, m := range goMetrics() {
		ns = append(ns, m.name)
	}
	return ns
}

func (c *goCollector) collect(emit func(family)) {
	var r rm
	for i := range r {
		r[i].Name = rmNames[i]
	}
	rtmetrics.Read(r[:])
	for _, m := range goMetrics() {
		emit(family{desc: &m.desc, samples: []sample{{value: m.value(&r)}}})
	}

	var gc debug.GCStats
	gc.PauseQuantiles = make([]time.Duration, 5)
	debug.ReadGCStats(&gc)
	q := make([]sample, 0, 7)
	for i, p := range gc.PauseQuantiles {
		q = append(q, sample{extra: "quantile", extraValue: float64(i) / 4, value: p.Seconds()})
	}
	q = append(q,
		sample{suffix: "_sum", value: gc.PauseTotal.Seconds()},
		sample{suffix: "_count", value: float64(gc.NumGC)})
	emit(family{desc: &goGCDesc, samples: q})
	emit(family{desc: &goLastGCDesc, samples: []sample{{value: float64(gc.LastGC.UnixNano()) / 1e9}}})
	emit(family{desc: &goInfoDesc, samples: []sample{{labels: `version="` + runtime.Version() + `"`, value: 1}}})
}
