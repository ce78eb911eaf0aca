package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentbox/agentbox/internal/yamldoc"
	"github.com/agentbox/agentbox/internal/yamldoc/yamldoctest"
)

var fullPolicy = &Policy{
	Version:        1,
	IsolationLevel: IsolationGVisor,
	AllowDegraded:  true,
	Resources: Resources{
		Memory: 512 << 20, CPUs: 1.5, Pids: 128, Timeout: Duration(90 * time.Second),
		Disk: 1e9, Output: 1 << 20, Files: 20000,
	},
	Filesystem: Filesystem{
		Workspace:            WorkspaceRW,
		Read:                 []string{"/opt/tools", "/usr/share/dict"},
		Write:                []string{"/var/cache/build"},
		ReadOutsideWorkspace: true,
		Protected:            []string{"secrets/**", "*.pem"},
	},
	Network: Network{
		Default: NetworkDeny, Mode: "none",
		Deny: []string{"169.254.169.254", "10.0.0.0/8", "*.internal.example:443"},
	},
	Env:      Env{Pass: []string{"TERM", "LANG"}, Set: map[string]string{"CI": "true", "GREETING": "hello world"}},
	Syscalls: Syscalls{Profile: ProfileStrict, Deny: []string{"ptrace", "mount"}},
}

var policyCmp = cmpopts.EquateEmpty()

func TestParseYAMLAndJSON(t *testing.T) {
	for _, file := range []string{"testdata/full.yaml", "testdata/full.json"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(file, data)
		if err != nil {
			t.Fatalf("Parse(%s): %v", file, err)
		}
		if diff := cmp.Diff(fullPolicy, p, policyCmp); diff != "" {
			t.Errorf("Parse(%s) (-want +got):\n%s", file, diff)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string // each error line, in order
	}{
		{"syntax", "version: [1\n", []string{"p.yaml:1:10: version: [ without its closing ]"}},
		{"empty", "", []string{`p.yaml:1:1: empty policy (it needs at least "version: 1")`}},
		{"two documents", "version: 1\n---\nversion: 1\n", []string{"p.yaml:2:1: one YAML document only: another starts here"}},
		{"missing version", "isolation: process\n", []string{"p.yaml:1:1: version: required field is missing"}},
		{"wrong version", "version: 2\n", []string{"p.yaml:1:10: version: value must be 1"}},
		{"unknown top-level field", "version: 1\nisolaton: gvisor\n", []string{
			"p.yaml:2:1: isolaton: unknown field (known: version, isolation, allow_degraded, resources, filesystem, network, env, syscalls)"}},
		{"unknown nested field", "version: 1\nresources:\n  memory: 1Gi\n  bogus: 3\n", []string{
			"p.yaml:4:3: resources.bogus: unknown field (known: memory, cpus, pids, timeout, disk, output, files)"}},
		{"several at once", "version: 1\nisolation: docker\nresources:\n  memory: 12Qi\n  cpus: -1\nfilesystem:\n  write: [relative]\n", []string{
			"p.yaml:2:12: isolation: value must be one of 'process', 'gvisor', 'microvm'",
			`p.yaml:4:11: resources.memory: "12Qi" is not a size: use bytes or a number with Ki, Mi, Gi, Ti, K, M or G (e.g. 512Mi)`,
			"p.yaml:5:9: resources.cpus: minimum: got -1, want 0",
			`p.yaml:7:11: filesystem.write[0]: "relative" is not an absolute path`,
		}},
		{"size out of range", "version: 1\nresources:\n  memory: 99999999999Ti\n", []string{
			`p.yaml:3:11: resources.memory: size "99999999999Ti" is out of range`}},
		{"bad duration", "version: 1\nresources:\n  timeout: 5 minutes\n", []string{
			`p.yaml:3:12: resources.timeout: "5 minutes" is not a duration: use e.g. 500ms, 30s, 10m, 1h30m`}},
		{"files: not an integer", "version: 1\nresources:\n  files: 1.5\n", []string{
			"p.yaml:3:10: resources.files: got number, want integer"}},
		{"files: negative", "version: 1\nresources:\n  files: -1\n", []string{
			"p.yaml:3:10: resources.files: minimum: got -1, want 0"}},
		{"files: too many", "version: 1\nresources:\n  files: 100000001\n", []string{
			"p.yaml:3:10: resources.files: maximum: got 1.00000001×10⁰⁸, want 1×10⁰⁸"}},
		{"null section", "version: 1\nresources:\n", []string{"p.yaml:2:12: resources: got null, want object"}},
		{"duplicate key", "version: 1\nversion: 1\n", []string{`p.yaml:2:1: key "version" given twice (first at 1:1)`}},
		{"anchor", "version: 1\nresources: &r {pids: 3}\n", []string{
			"p.yaml:2:12: resources: YAML anchors (&name) are not accepted"}},
		{"octal or decimal", "version: 1\nresources:\n  pids: 010\n", []string{
			"p.yaml:3:9: resources.pids: 010: a number with a leading zero is octal in YAML 1.1 and decimal in 1.2: quote it, or write it without the zero (or as 0o...)"}},
		{"tab indentation", "version: 1\nresources:\n\tpids: 10\n", []string{
			"p.yaml:3:1: resources: a tab in indentation: YAML indents with spaces only"}},
		{"key twice in a flow", "version: 1\nenv: {set: {A: x, A: y}}\n", []string{
			`p.yaml:2:19: env.set: key "A" given twice (first at 2:13)`}},
		{"tag", "version: 1\nisolation: !!str process\n", []string{"p.yaml:2:12: isolation: YAML tags (!tag) are not accepted"}},
		{"semantic", "version: 1\nfilesystem:\n  protected: [/abs, 'a**']\n  write: [/, /proc/x, /a/../b]\nnetwork:\n  deny: [10.0.0.1/8, 'x:0']\n", []string{
			`p.yaml:3:15: filesystem.protected[0]: pattern "/abs": patterns are relative to the workspace; drop the leading /`,
			`p.yaml:3:21: filesystem.protected[1]: pattern "a**": ** must be a whole path segment`,
			"p.yaml:4:11: filesystem.write[0]: the host root cannot be writable",
			`p.yaml:4:14: filesystem.write[1]: "/proc/x": host /proc cannot be mounted into a sandbox`,
			`p.yaml:4:23: filesystem.write[2]: "/a/../b": . and .. are not allowed in paths`,
			`p.yaml:6:10: network.deny[0]: "10.0.0.1/8" is not a network rule (host[:port], *.domain[:port] or CIDR): host bits are set; did you mean 10.0.0.0/8?`,
			`p.yaml:6:22: network.deny[1]: "x:0" is not a network rule (host[:port], *.domain[:port] or CIDR): bad port`,
		}},
		{"env (schema)", "{\"version\": 1,\n \"env\": {\"set\": {\"1X\": \"v\", \"N\": 1}, \"pass\": [\"A-B\"]}}", []string{
			"p.yaml:2:34: env.set.N: got number, want string",
			`p.yaml:2:47: env.pass[0]: "A-B" is not an environment variable name`,
		}},
		{"env (semantic)", "{\"version\": 1,\n \"env\": {\"set\": {\"1X\": \"v\"}}}", []string{
			`p.yaml:2:18: env.set.1X: "1X" is not an environment variable name`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("p.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", p)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error is %T, not Errors: %v", err, err)
			}
			got := strings.Split(err.Error(), "\n")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			for _, e := range es {
				if e.Line == 0 || e.File != "p.yaml" {
					t.Errorf("error without a place: %+v", e)
				}
			}
		})
	}
}

// TestParseBombs checks that Parse refuses each bomb, as soon as it goes
// over a limit, with an error at a place, allocating next to nothing.
func TestParseBombs(t *testing.T) {
	docs := map[string][]byte{}
	for name, b := range yamldoctest.PolicyBombs() {
		docs[name] = []byte(b)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	errs := map[string]error{}
	for name, b := range docs {
		_, errs[name] = Parse("bomb.yaml", b)
	}
	runtime.ReadMemStats(&after)
	for name, err := range errs {
		var es Errors
		if !errors.As(err, &es) || len(es) != 1 || es[0].Line == 0 || !strings.Contains(es[0].Message, "more than") && !yamldoctest.Invalid[name] {
			t.Errorf("%s: %v", name, err)
		}
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Errorf("refusing %d bombs allocated %d KiB", len(docs), grew>>10)
	}
}

// TestParseErrorsBounded checks that a document with a problem per value
// under a long key yields a bounded report, with the key shortened.
func TestParseErrorsBounded(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("k", 1000)
	doc := "version: 1\nenv:\n  set:\n    " + key + ": [" + strings.Repeat(".inf, ", 500) + "]\n"
	_, err := Parse("p.yaml", []byte(doc))
	var es Errors
	if !errors.As(err, &es) || len(es) != maxErrors+1 || !strings.Contains(es[maxErrors].Message, "more problems") {
		t.Fatalf("%d errors: %.500v", len(es), err)
	}
	if len(err.Error()) > 64*maxErrors*4 {
		t.Errorf("the report is %d bytes", len(err.Error()))
	}
}

func TestParseTooLarge(t *testing.T) {
	_, err := Parse("big.yaml", bytes.Repeat([]byte("#"), MaxSize+1))
	if err == nil || !strings.Contains(err.Error(), "the limit is") {
		t.Fatalf("Parse of an oversized file = %v", err)
	}
}

func TestPresets(t *testing.T) {
	if got := PresetNames(); !slices.Equal(got, []string{"agent-default", "exec-default", "strict"}) {
		t.Fatalf("PresetNames = %v", got)
	}
	for _, name := range PresetNames() {
		p, err := Preset(name)
		if err != nil {
			t.Fatalf("Preset(%s): %v", name, err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
		spec, err := p.Compile(t.TempDir(), nil)
		if err != nil {
			t.Errorf("preset %s does not compile: %v", name, err)
		}
		if spec.Limits.MemoryBytes == 0 || spec.Limits.Pids == 0 || spec.Limits.Timeout == 0 {
			t.Errorf("preset %s leaves memory, pids or timeout unlimited: %+v", name, spec.Limits)
		}
		// No preset opens anything: the proxy with no allow rule, or
		// nothing at all.
		if m := spec.Network.Mode; m == "host" || len(spec.Network.Allow) > 0 {
			t.Errorf("preset %s opens the network: %+v", name, spec.Network)
		}
		// Each call returns a fresh copy.
		p.Resources.Memory = 1
		if q, _ := Preset(name); q.Resources.Memory == 1 {
			t.Errorf("Preset(%s) returned shared state", name)
		}
	}
	strict, _ := Preset("strict")
	exec, _ := Preset("exec-default")
	if strict.Filesystem.Workspace != WorkspaceRO || strict.Syscalls.Profile != ProfileStrict {
		t.Errorf("strict preset is not read-only with the strict profile: %+v", strict)
	}
	if strict.Resources.Memory > exec.Resources.Memory || strict.Resources.Timeout > exec.Resources.Timeout {
		t.Error("strict preset is looser than exec-default")
	}
	if _, err := Preset("nope"); err == nil || !strings.Contains(err.Error(), "agent-default, exec-default, strict") {
		t.Errorf("Preset(nope) = %v", err)
	}
}

func TestSchemaPublished(t *testing.T) {
	published, err := os.ReadFile("../../../docs/policy.v1.json")
	if err != nil {
		t.Fatalf("the schema must be published for editors: %v", err)
	}
	if !bytes.Equal(published, Schema) {
		t.Fatal("docs/policy.v1.json differs from internal/sandbox/policy/policy.v1.json; copy the latter over the former")
	}
}

// The schema and the Go type must describe the same fields: a field only
// in the struct could never be set, one only in the schema would be
// refused by the strict decoder.
func TestSchemaMatchesStruct(t *testing.T) {
	var sch map[string]any
	if err := json.Unmarshal(Schema, &sch); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, typ reflect.Type, node map[string]any)
	walk = func(path string, typ reflect.Type, node map[string]any) {
		props, _ := node["properties"].(map[string]any)
		if node["additionalProperties"] != false {
			t.Errorf("%s: schema allows additional properties", path)
		}
		var fields []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := yamlName(f)
			fields = append(fields, name)
			if jn, _, _ := strings.Cut(f.Tag.Get("json"), ","); jn != name {
				t.Errorf("%s.%s: json name %q differs", path, name, jn)
			}
			sub, ok := props[name].(map[string]any)
			if !ok {
				t.Errorf("%s.%s: in the struct, not in the schema", path, name)
				continue
			}
			if f.Type.Kind() == reflect.Struct {
				walk(path+"."+name, f.Type, sub)
			}
		}
		for name := range props {
			if !slices.Contains(fields, name) {
				t.Errorf("%s.%s: in the schema, not in the struct", path, name)
			}
		}
	}
	walk("policy", reflect.TypeFor[Policy](), sch)
}

func TestUnits(t *testing.T) {
	sizes := map[string]ByteSize{
		"0": 0, "1024": 1024, "1Ki": 1024, "512Mi": 512 << 20, "1.5Gi": 3 << 29, "2Ti": 2 << 40,
		"1K": 1000, "1k": 1000, "100M": 1e8, "1G": 1e9, "7B": 7,
	}
	for s, want := range sizes {
		got, err := ParseByteSize(s)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "Mi", "-1", "1e3", "1 Mi", "1Qi", "99999999999Ti"} {
		if _, err := ParseByteSize(s); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded", s)
		}
	}
	for b, want := range map[ByteSize]string{512 << 20: "512Mi", 1 << 30: "1Gi", 1000: "1000", 1536: "1536", 3072: "3Ki"} {
		if got := b.String(); got != want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(b), got, want)
		}
	}
	for d, want := range map[time.Duration]string{2 * time.Hour: "2h", 90 * time.Second: "1m30s", 30 * time.Second: "30s", 5 * time.Minute: "5m", time.Hour + time.Second: "1h0m1s"} {
		if got := Duration(d).String(); got != want {
			t.Errorf("Duration(%v).String() = %q, want %q", d, got, want)
		}
	}
	if _, err := ParseDuration("-1s"); err == nil {
		t.Error("negative duration accepted")
	}
}

// A parsed policy written back as YAML or JSON parses to the same policy.
func TestMarshalRoundTrip(t *testing.T) {
	policies := []*Policy{fullPolicy}
	for _, name := range PresetNames() {
		p, _ := Preset(name)
		policies = append(policies, p)
	}
	for _, p := range policies {
		y, err := yamldoc.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse("out.yaml", y)
		if err != nil {
			t.Fatalf("re-parse of\n%s: %v", y, err)
		}
		if diff := cmp.Diff(p, back, policyCmp); diff != "" {
			t.Errorf("YAML round trip (-want +got):\n%s\n%s", diff, y)
		}
		j, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		back, err = Parse("out.json", j)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", j, err)
		}
		if diff := cmp.Diff(p, back, policyCmp); diff != "" {
			t.Errorf("JSON round trip (-want +got):\n%s\n%s", diff, j)
		}
		var viaJSON Policy
		if err := json.Unmarshal(j, &viaJSON); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		if diff := cmp.Diff(p, &viaJSON, policyCmp); diff != "" {
			t.Errorf("encoding/json round trip (-want +got):\n%s", diff)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, file := range []string{"testdata/full.yaml", "testdata/full.json", "presets/strict.yaml", "presets/agent-default.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("version: 1\nresources: {memory: 1Gi}\n"))
	f.Add([]byte("version: 1\na: &x [*x]\n"))
	f.Add([]byte("{\"version\": 1, \"env\": {\"set\": {\"\": \"\"}}}"))
	f.Add([]byte("version: 1\nfilesystem: {protected: ['**/**/x', 'a/']}\n"))
	for _, b := range yamldoctest.PolicyBombs() {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("f.yaml", data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not a non-empty Errors: %v", err)
			}
			for _, e := range es {
				if !strings.HasPrefix(e.Error(), "f.yaml") {
					t.Fatalf("error does not name the file: %v", e)
				}
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse accepted a policy Validate rejects: %v", err)
		}
		// What Parse accepts, it can print and read back the same.
		y, err := yamldoc.Marshal(p)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := Parse("back.yaml", y)
		if err != nil {
			t.Fatalf("re-parse of\n%s: %v", y, err)
		}
		if back.Hash() != p.Hash() {
			t.Fatalf("round trip changed the policy:\n%s", y)
		}
		if _, err := Effective(p, p); err != nil {
			t.Fatalf("Effective(p, p): %v", err)
		}
	})
}
