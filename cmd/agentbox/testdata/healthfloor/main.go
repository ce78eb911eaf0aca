// Command healthfloor is the floor BenchmarkHealth measures ours against:
// the least a Go net/http server does to answer GET /v1/health with the
// same JSON document (no middleware, no request id, no metrics), built
// like the daemon (scripts/build's tags, static). What ours costs above it
// is the daemon's; what it costs above the peer is Go's net/http and
// runtime on this machine.
//
//	healthfloor --listen 127.0.0.1:PORT
package main

import (
	"flag"
	"log"
	"net/http"
	"strconv"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	started := time.Now()
	prefix := []byte(`{"status":"ok","version":"floor","schema_version":1,"uptime_ms":`)
	http.HandleFunc("GET /v1/health", func(w http.ResponseWriter, _ *http.Request) {
		b := make([]byte, 0, len(prefix)+24)
		b = append(b, prefix...)
		b = strconv.AppendInt(b, time.Since(started).Milliseconds(), 10)
		b = append(b, "}\n"...)
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(b)
	})
	log.Fatal(http.ListenAndServe(*listen, nil))
}
