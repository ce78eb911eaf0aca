//go:build ignore

// binsize reports what each module costs in the agentbox binary: it sums the
// symbol sizes of an unstripped build by the module that owns each symbol.
//
//	go run scripts/binsize.go BINARY
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run scripts/binsize.go BINARY (unstripped)")
		os.Exit(2)
	}
	bin := os.Args[1]
	mods := modules(bin)
	out, err := exec.Command("go", "tool", "nm", "-size", bin).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go tool nm:", err)
		os.Exit(1)
	}
	sizes := map[string]int64{}
	var total int64
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || n == 0 {
			continue
		}
		// Only code and read-only data are in the file; D/B symbols
		// include the bss, which costs no bytes on disk.
		if t := f[2]; t != "T" && t != "t" && t != "R" && t != "r" {
			continue
		}
		sym := strings.Join(f[3:], " ")
		sizes[owner(sym, mods)] += n
		total += n
	}
	type row struct {
		mod  string
		size int64
	}
	var rows []row
	for m, s := range sizes {
		rows = append(rows, row{m, s})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].size > rows[j].size })
	fmt.Printf("%-48s %10s %6s\n", "module (symbols)", "KiB", "share")
	for _, r := range rows {
		if r.size < 16<<10 {
			continue
		}
		fmt.Printf("%-48s %10.0f %5.1f%%\n", r.mod, float64(r.size)/1024, 100*float64(r.size)/float64(total))
	}
	fmt.Printf("%-48s %10.0f\n", "total symbol bytes", float64(total)/1024)
}

// modules lists the module paths linked into bin, longest first.
func modules(bin string) []string {
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go version -m:", err)
		os.Exit(1)
	}
	var mods []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "dep" || f[0] == "mod") {
			mods = append(mods, f[1])
		}
	}
	sort.Slice(mods, func(i, j int) bool { return len(mods[i]) > len(mods[j]) })
	return mods
}

func owner(sym string, mods []string) string {
	sym = strings.TrimPrefix(sym, "type:")
	sym = strings.TrimPrefix(sym, "go:")
	sym = strings.TrimPrefix(sym, "*")
	for _, m := range mods {
		if strings.HasPrefix(sym, m+".") || strings.HasPrefix(sym, m+"/") {
			return m
		}
	}
	sym = strings.TrimPrefix(sym, "vendor/")
	if i := strings.IndexAny(sym, "./*"); i > 0 {
		return "std: " + sym[:i]
	}
	return "std: other"
}
