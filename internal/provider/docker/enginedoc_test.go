package docker

import (
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	yaml "go.yaml.in/yaml/v4"

	"github.com/agentbox/agentbox/internal/provider"
)

// engineDoc is testdata/engine-api.yaml, the subset of the Engine API
// document the client is written from.
type engineDoc struct {
	Paths       map[string]map[string]docOperation `yaml:"paths"`
	Definitions map[string]docSchema               `yaml:"definitions"`
}

type docOperation struct {
	Parameters []struct {
		Name   string    `yaml:"name"`
		In     string    `yaml:"in"`
		Schema docSchema `yaml:"schema"`
	} `yaml:"parameters"`
	Responses map[int]struct {
		Schema docSchema `yaml:"schema"`
	} `yaml:"responses"`
}

type docSchema struct {
	Ref        string               `yaml:"$ref"`
	AllOf      []docSchema          `yaml:"allOf"`
	Properties map[string]docSchema `yaml:"properties"`
	Items      *docSchema           `yaml:"items"`
	AddlProps  *docSchema           `yaml:"additionalProperties"`
}

func loadEngineDoc(t *testing.T) *engineDoc {
	t.Helper()
	b, err := os.ReadFile("testdata/engine-api.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d engineDoc
	if err := yaml.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// props are a schema's properties, its references and allOf resolved.
func (d *engineDoc) props(t *testing.T, s docSchema) map[string]docSchema {
	t.Helper()
	if s.Ref != "" {
		def, ok := d.Definitions[strings.TrimPrefix(s.Ref, "#/definitions/")]
		if !ok {
			t.Fatalf("no definition %s", s.Ref)
		}
		return d.props(t, def)
	}
	out := map[string]docSchema{}
	for _, a := range s.AllOf {
		for k, v := range d.props(t, a) {
			out[k] = v
		}
	}
	for k, v := range s.Properties {
		out[k] = v
	}
	return out
}

// checkFields fails for every JSON field of the Go type typ that the
// schema does not have, recursing into struct fields.
func (d *engineDoc) checkFields(t *testing.T, typ reflect.Type, s docSchema, where string) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
		if s.Items != nil {
			s = *s.Items
		}
	}
	if typ.Kind() == reflect.Map && s.AddlProps != nil {
		d.checkFields(t, typ.Elem(), *s.AddlProps, where+"[]")
		return
	}
	if typ.Kind() != reflect.Struct {
		return
	}
	props := d.props(t, s)
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		sub, ok := props[name]
		if !ok {
			t.Errorf("%s: field %s (%s) is not in the document", where, name, f.Name)
			continue
		}
		d.checkFields(t, f.Type, sub, where+"."+name)
	}
}

// TestEngineBodiesInDocument: every field the client sends or reads is one
// the Engine API document defines, where it defines it.
func TestEngineBodiesInDocument(t *testing.T) {
	d := loadEngineDoc(t)
	var create docSchema
	for _, p := range d.Paths["/containers/create"]["post"].Parameters {
		if p.In == "body" {
			create = p.Schema
		}
	}
	d.checkFields(t, reflect.TypeFor[createRequest](), create, "POST /containers/create")
	d.checkFields(t, reflect.TypeFor[inspected](), d.Paths["/containers/{id}/json"]["get"].Responses[200].Schema, "GET /containers/{id}/json")
	d.checkFields(t, reflect.TypeFor[engineVersion](), d.Paths["/version"]["get"].Responses[200].Schema, "GET /version")
	if _, ok := d.props(t, d.Paths["/info"]["get"].Responses[200].Schema)["Runtimes"]; !ok {
		t.Error("GET /info: no Runtimes")
	}
	if _, ok := d.props(t, docSchema{Ref: "#/definitions/ErrorResponse"})["message"]; !ok {
		t.Error("ErrorResponse: no message")
	}
}

// TestEngineRequestsInDocument: every request the client makes, each of
// its calls made against a recording daemon, is an operation of the
// document with query parameters the operation declares.
func TestEngineRequestsInDocument(t *testing.T) {
	d := loadEngineDoc(t)
	var mu sync.Mutex
	var got []*http.Request
	p, _ := fakeDaemon(t, "1.41", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/containers/json"):
			_, _ = w.Write([]byte(`[]`))
		case strings.HasSuffix(r.URL.Path, "/containers/create"):
			_, _ = w.Write([]byte(`{"Id":"abc"}`))
		case r.URL.Path == "/v1.41/build", strings.HasSuffix(r.URL.Path, "/logs"):
		default:
			_, _ = w.Write([]byte(`{}`))
		}
	})
	ctx := t.Context()
	e := p.cli
	calls := []func() error{
		func() error { _, err := e.ping(ctx); return err },
		func() error { _, err := e.serverVersion(ctx); return err },
		func() error { _, err := e.runtimes(ctx); return err },
		func() error { return e.imageInspect(ctx, "registry.example/agentbox-sandbox:x") },
		func() error {
			rc, err := e.imageBuild(ctx, strings.NewReader(""), buildOptions{tag: "x:1", networkMode: "none", labels: map[string]string{"a": "b"}})
			if err == nil {
				rc.Close()
			}
			return err
		},
		func() error {
			req := p.containerConfig("img", map[string]string{"a": "b"}, 1, 1)
			pl, err := Map([]byte(`{"version":1,"resources":{"memory":"256Mi","cpus":0.5,"pids":100,"disk":"64Mi","files":1000}}`))
			if err != nil {
				return err
			}
			req.HostConfig = hostConfig(options{pids: 64}, providerSpecForDoc(), pl, "/tmp/x")
			_, err = e.containerCreate(ctx, "agentbox-x", req)
			return err
		},
		func() error { return e.containerStart(ctx, "abc") },
		func() error { _, err := e.containerInspect(ctx, "abc"); return err },
		func() error { return e.containerRemove(ctx, "abc") },
		func() error { _, err := e.containerList(ctx, "agentbox.owner=o"); return err },
		func() error {
			rc, err := e.containerLogs(ctx, "abc", 20)
			if err == nil {
				rc.Close()
			}
			return err
		},
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if len(got) != len(calls)-1 { // ping is answered by fakeDaemon
		t.Fatalf("%d requests for %d calls", len(got), len(calls)-1)
	}
	type route struct {
		method, path string
		re           *regexp.Regexp
	}
	var routes []route
	for path, ops := range d.Paths {
		pat := regexp.MustCompile(`\\\{name\\\}`).ReplaceAllString(regexp.QuoteMeta(path), `[^?#]+`)
		pat = regexp.MustCompile(`\\\{[a-z]+\\\}`).ReplaceAllString(pat, `[^/]+`)
		for m := range ops {
			routes = append(routes, route{strings.ToUpper(m), path, regexp.MustCompile("^/v1\\.41" + pat + "$")})
		}
	}
	for _, r := range got {
		i := slices.IndexFunc(routes, func(rt route) bool { return rt.method == r.Method && rt.re.MatchString(r.URL.Path) })
		if i < 0 {
			t.Errorf("%s %s is not an operation of the document", r.Method, r.URL.Path)
			continue
		}
		op := d.Paths[routes[i].path][strings.ToLower(r.Method)]
		for k := range r.URL.Query() {
			if !slices.ContainsFunc(op.Parameters, func(p struct {
				Name   string    `yaml:"name"`
				In     string    `yaml:"in"`
				Schema docSchema `yaml:"schema"`
			}) bool {
				return p.In == "query" && p.Name == k
			}) {
				t.Errorf("%s %s: query parameter %s is not in the document", r.Method, routes[i].path, k)
			}
		}
	}
}

func providerSpecForDoc() provider.Spec {
	return provider.Spec{CPUs: 1, MemoryBytes: 1 << 30}
}
