package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/version"
)

// exporter batches ended spans and POSTs them to the OTLP/HTTP endpoint
// from one goroutine. Spans wait in a bounded queue: when it is full, a
// span is dropped and counted, never waited for, so that tracing never
// holds up a request or a turn.
type exporter struct {
	endpoint string
	// host is the endpoint without user, path or query, for logs.
	host     string
	headers  Headers
	gzip     bool
	client   *http.Client
	res      resource
	batch    int
	interval time.Duration
	log      *slog.Logger

	queue   chan *Span
	dropped atomic.Uint64
	// exported and failed count spans sent and spans whose request failed.
	exported, failed atomic.Uint64
	// closed is set once shutdown begins: later spans are dropped.
	closed atomic.Bool
	// flush asks the loop to send what it has (tests, Flush); stop
	// carries the shutdown's context; done is closed when the loop ends.
	flush    chan chan struct{}
	stop     chan context.Context
	done     chan struct{}
	stopOnce sync.Once
	// lastLog rate-limits the failure log.
	lastLog time.Time
}

// failureLogEvery bounds how often a failing export is logged.
const failureLogEvery = time.Minute

func newExporter(cfg Config, log *slog.Logger) (*exporter, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("tracing: the endpoint is not an http:// or https:// URL")
	}
	e := &exporter{
		endpoint: cfg.Endpoint, host: u.Scheme + "://" + u.Host,
		headers: cfg.Headers, gzip: cfg.Gzip,
		client: &http.Client{
			Timeout: orDefault(cfg.Timeout, DefaultTimeout),
			// No redirects: the headers (credentials) go to the
			// configured endpoint only; a redirect is a failed export.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		batch:    orDefault(cfg.BatchSize, DefaultBatchSize),
		interval: orDefault(cfg.Interval, DefaultInterval),
		log:      log,
		queue:    make(chan *Span, orDefault(cfg.QueueSize, DefaultQueueSize)),
		flush:    make(chan chan struct{}),
		stop:     make(chan context.Context, 1),
		done:     make(chan struct{}),
	}
	if cfg.tls != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cfg.tls.Clone()
		e.client.Transport = tr
	}
	e.res = resource{scopeName: "github.com/agentbox/agentbox", scopeVersion: version.String()}
	name := cfg.ServiceName
	if name == "" {
		name = cfg.Resource["service.name"]
	}
	if name == "" {
		name = "agentbox"
	}
	e.res.attrs = append(e.res.attrs, attr{key: "service.name", s: clean(name)})
	if cfg.ServiceVersion != "" {
		e.res.attrs = append(e.res.attrs, attr{key: "service.version", s: clean(cfg.ServiceVersion)})
	}
	keys := make([]string, 0, len(cfg.Resource))
	for k := range cfg.Resource {
		if k != "service.name" && (k != "service.version" || cfg.ServiceVersion == "") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		e.res.attrs = append(e.res.attrs, attr{key: clean(k), s: clean(cfg.Resource[k])})
	}
	e.res.attrs = append(e.res.attrs,
		attr{key: "telemetry.sdk.name", s: "agentbox"}, attr{key: "telemetry.sdk.language", s: "go"})
	// The exporter's goroutine is the tracer's, not any request's: it
	// lives until shutdown.
	go e.run()
	return e, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// enqueue hands an ended span to the exporter without ever blocking.
func (e *exporter) enqueue(s *Span) {
	if e.closed.Load() {
		e.dropped.Add(1)
		return
	}
	select {
	case e.queue <- s:
	default:
		e.dropped.Add(1)
	}
}

func (e *exporter) run() {
	defer close(e.done)
	t := time.NewTicker(e.interval)
	defer t.Stop()
	buf := make([]*Span, 0, e.batch)
	send := func(ctx context.Context) {
		if len(buf) > 0 {
			e.export(ctx, buf)
			clear(buf)
			buf = buf[:0]
		}
	}
	for {
		select {
		case s := <-e.queue:
			buf = append(buf, s)
			if len(buf) >= e.batch {
				send(context.Background())
			}
		case <-t.C:
			send(context.Background())
		case ack := <-e.flush:
			e.drain(context.Background(), &buf, send)
			close(ack)
		case ctx := <-e.stop:
			e.drain(ctx, &buf, send)
			return
		}
	}
}

// drain sends everything queued, in batches; once ctx is over, what is
// left is dropped and counted.
func (e *exporter) drain(ctx context.Context, buf *[]*Span, send func(context.Context)) {
	for {
		select {
		case s := <-e.queue:
			*buf = append(*buf, s)
			if len(*buf) < e.batch {
				continue
			}
		default:
		}
		if ctx.Err() != nil {
			n := uint64(len(*buf) + len(e.queue))
			for len(e.queue) > 0 {
				<-e.queue
			}
			clear(*buf)
			*buf = (*buf)[:0]
			e.dropped.Add(n)
			return
		}
		full := len(*buf) >= e.batch
		send(ctx)
		if !full && len(e.queue) == 0 {
			return
		}
	}
}

// Flush sends what is queued now and waits for it (or for ctx).
func (e *exporter) Flush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case e.flush <- ack:
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown stops taking spans, sends what is queued within ctx and waits
// for the loop to end (its last request is bound to ctx, so it ends soon
// after ctx does).
func (e *exporter) shutdown(ctx context.Context) error {
	e.stopOnce.Do(func() {
		e.closed.Store(true)
		e.stop <- ctx
	})
	<-e.done
	if n := e.dropped.Load(); n > 0 {
		e.log.Warn("trace spans dropped", "count", n)
	}
	return ctx.Err()
}

// export sends one batch. A failure is counted and logged (at most once a
// minute), naming the endpoint's host, never a header.
func (e *exporter) export(ctx context.Context, spans []*Span) {
	err := e.post(ctx, encodeRequest(nil, &e.res, spans))
	if err == nil {
		e.exported.Add(uint64(len(spans)))
		return
	}
	e.failed.Add(uint64(len(spans)))
	if now := time.Now(); now.Sub(e.lastLog) >= failureLogEvery {
		e.lastLog = now
		e.log.Warn("exporting trace spans failed", "endpoint", e.host, "spans", len(spans), "err", err)
	}
}

func (e *exporter) post(ctx context.Context, body []byte) error {
	if e.gzip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = b.Bytes()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err != nil {
		return errors.New("cannot build the export request")
	}
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		// Only the cause: the *url.Error around it repeats the URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the collector answered %s", resp.Status)
	}
	return nil
}
