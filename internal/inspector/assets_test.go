package inspector

import (
	"bytes"
	"compress/gzip"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/api"
)

var update = flag.Bool("update", false, "rewrite assets/*.gz from web/")

// TestAssetsUpToDate: assets/ holds exactly web/'s files, each
// gzip-compressed, so the binary serves what web/ says; -update writes
// them (deterministically: no name, no time, best compression).
func TestAssetsUpToDate(t *testing.T) {
	web, err := os.ReadDir("web")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range web {
		src, err := os.ReadFile(filepath.Join("web", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		gzName := filepath.Join("assets", e.Name()+".gz")
		want = append(want, e.Name()+".gz")
		if *update {
			var b bytes.Buffer
			zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := zw.Write(src); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(gzName, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		gz, err := os.ReadFile(gzName)
		if err != nil {
			t.Fatalf("%v (run: go test ./internal/inspector -run TestAssetsUpToDate -update)", err)
		}
		got, err := api.Gunzip(gz)
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("%s does not hold web/%s (err %v); run: go test ./internal/inspector -run TestAssetsUpToDate -update", gzName, e.Name(), err)
		}
	}
	have, err := os.ReadDir("assets")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range have {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, want) {
		t.Fatalf("assets/ holds %v; want %v (the files of web/, compressed)", names, want)
	}
}
