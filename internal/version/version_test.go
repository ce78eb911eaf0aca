package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestBuild(t *testing.T) {
	in := Build()
	if in.GoVersion != runtime.Version() || in.Version == "" {
		t.Fatalf("Build() = %+v", in)
	}
	tests := []struct {
		in   Info
		want string
	}{
		{Info{GoVersion: "go1.26.8"}, "go1.26.8"},
		{Info{GoVersion: "go1.26.8", Commit: "0123456789abcdef", Modified: true, Tags: []string{"grpcnotrace", "x"}},
			"go1.26.8, commit 0123456789ab (modified), tags grpcnotrace,x"},
		{Info{GoVersion: "go1.26.8", Commit: "abc"}, "go1.26.8, commit abc"},
	}
	for _, tc := range tests {
		if got := tc.in.Details(); got != tc.want {
			t.Errorf("Details(%+v) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if !strings.HasPrefix(in.Details(), runtime.Version()) {
		t.Errorf("Details() = %q", in.Details())
	}
}
