package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxBinary is the ceiling on the default build's size: the product's
// goal is 16 MiB; this fails, above the goal with a margin, when a change
// makes the binary grow back. 17 MiB since huma, goccy/go-yaml,
// acp-go-sdk and go-seccomp-bpf left the run-time binary (16.75 MiB then):
// a change that needs more raises it here, in its own commit, saying why.
// 17.5 MiB since the workspace API and the inspector (issue 15): the files
// API with archive/tar +448 KiB, session diffs and commands +140 KiB, the
// inspector +48 KiB, the Python zygote +36 KiB, less 188 KiB for the
// OpenAPI document embedded compressed: 17.21 MiB then.
// 19 MiB, the issue's own ceiling, since the PostgreSQL store (pgconn with
// its SASLprep tables, +0.96 MiB) and the providers (docker on an Engine API
// client of its own, e2b, daytona and the relay, +0.3 MiB; the official
// Docker client alone cost 0.56 MiB and is used only by the tests): 18.57
// MiB then. The goal stays 16 MiB. 18.47 MiB (19,370,146 bytes) after the
// copies of generic code per type were cut (the HTTP adapter, pdqsort per
// element type; docs/ARCHITECTURE.md, "Binary size"): not far enough below
// 19 MiB to lower the ceiling. 18.75 MiB (19,660,962 bytes) with session
// ownership among daemons, Vercel, provider exec and the Docker egress path.
// 19.03 MiB (19,951,778 bytes) with provider processes, policies mapped onto
// Docker, pause and snapshot resume and the sandbox launcher, and the
// inspector's assets embedded compressed: over the ceiling, so scripts/build
// compiles agentbox's own packages without inlining: 18.32 MiB (19,214,498
// bytes). 17.625 MiB since the PostgreSQL store left pgx for a wire-protocol
// client of its own (internal/store/postgres/pgwire; pgconn, pgproto3 and
// x/text's PRECIS and language tables out): 18,436,258 bytes (17.58 MiB).
// 17.75 MiB with the start's work on first use and the release of the
// start-up pages merged beside it: 18,469,026 bytes (17.61 MiB), and a
// ceiling 12 KiB above that would fail the next small change.
// 17.25 MiB since scripts/build compiles the standard library's and other
// modules' packages that run off the hot paths (TLS and x509 handshakes,
// ASN.1, cobra, x/text, ...) without inlining: 18,043,042 bytes (17.21
// MiB).
const maxBinary = 17<<20 + 256<<10

// TestBinarySize builds the default binary with scripts/build itself (the
// static, stripped build users get) and fails when it is larger than
// maxBinary, naming the modules that cost the most.
func TestBinarySize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "agentbox")
	build := exec.CommandContext(t.Context(), "../../scripts/build")
	build.Env = append(os.Environ(), "OUT="+bin)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("default build: %d bytes (%.2f MiB; ceiling %.3f MiB, goal 16 MiB)", fi.Size(), mib(fi.Size()), mib(maxBinary))
	if fi.Size() <= maxBinary {
		return
	}
	// What each module costs: the same build unstripped, through
	// scripts/binsize.go.
	full := filepath.Join(t.TempDir(), "agentbox.full")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-tags", buildTags(t), "-o", full, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	top := "(unstripped build failed)"
	if out, err := cmd.CombinedOutput(); err == nil {
		out, err = exec.CommandContext(t.Context(), "go", "run", "../../scripts/binsize.go", full).CombinedOutput()
		top = string(out)
		if err == nil {
			top = strings.Join(firstLines(top, 16), "\n")
		}
	} else {
		top += "\n" + string(out)
	}
	t.Fatalf("the default build is %d bytes (%.2f MiB), above the %.3f MiB ceiling; the largest modules:\n%s\n"+
		"(a call of reflect.Value.Method/MethodByName anywhere in the linked program, e.g. text/template, keeps every exported method: see TestNoReflectMethod)",
		fi.Size(), mib(fi.Size()), mib(maxBinary), top)
}

// buildTags returns the build tags of scripts/build, so the builds here
// are the program users get.
func buildTags(t *testing.T) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "../../scripts/build", "--print-tags").Output()
	if err != nil {
		t.Fatalf("scripts/build --print-tags: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestNoReflectMethod links the default build with -dumpdep and fails if
// a function the linker marks ReflectMethod is reachable: a call of
// reflect.Value.Method or MethodByName with a non-constant name (as
// text/template's evaluation makes) makes the linker keep every exported
// method of every reachable type, 2 MiB of this binary. It prints the
// chain of callers that reaches it.
func TestNoReflectMethod(t *testing.T) {
	if testing.Short() {
		t.Skip("links the binary: skipped with -short")
	}
	cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-tags", buildTags(t),
		"-ldflags=-s -w -dumpdep", "-o", filepath.Join(t.TempDir(), "agentbox"), ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	// The go command relays the linker's output on its stderr.
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -ldflags=-dumpdep: %v\n%s", err, out)
	}
	// Lines are "caller -> callee", a symbol flagged " <ReflectMethod>".
	parent := map[string]string{}
	var flagged []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		from, to, ok := strings.Cut(sc.Text(), " -> ")
		if !ok {
			continue
		}
		from, _ = symFlags(from)
		to, reflectMethod := symFlags(to)
		if reflectMethod {
			flagged = append(flagged, to)
		}
		if _, seen := parent[to]; !seen {
			parent[to] = from
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(parent) < 1000 {
		t.Fatalf("the linker's -dumpdep printed %d edges: not the dependency graph", len(parent))
	}
	for _, f := range flagged {
		chain := []string{f}
		for s := parent[f]; s != "" && s != "_" && len(chain) < 40; s = parent[s] {
			chain = append(chain, s)
		}
		t.Errorf("reachable reflect method call %s, through:\n  %s", f, strings.Join(chain, "\n  <- "))
	}
}

// symFlags splits -dumpdep's flags off a symbol: "name <UsedInIface>",
// "name <ReflectMethod>" or both, with no space between them.
func symFlags(s string) (name string, reflectMethod bool) {
	i := strings.LastIndex(s, " <")
	if i < 0 {
		return s, false
	}
	switch s[i+1:] {
	case "<UsedInIface>":
		return s[:i], false
	case "<ReflectMethod>", "<UsedInIface><ReflectMethod>":
		return s[:i], true
	}
	return s, false
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func firstLines(s string, n int) []string {
	lines := strings.Split(s, "\n")
	return lines[:min(n, len(lines))]
}
