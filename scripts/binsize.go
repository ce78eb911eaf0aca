//go:build ignore

// binsize reports what each module (or, with -pkg, each package) costs in
// the agentbox binary: it sums the sizes of an unstripped build's symbols
// that take bytes in the file (code, read-only data and initialised data:
// the symbols of the sections the ELF file holds, so the tables of
// golang.org/x/text count and the bss does not) by the module or package
// that owns each symbol. The function table (.gopclntab) is not split by
// symbol: it is printed on its own line, and grows with the code. With
// -table, the function table is split too, by the function each part
// describes: its record, name and pc-value tables (the funcdata, file and
// compilation-unit tables are left on a line of their own).
//
//	go run scripts/binsize.go [-pkg] [-table] [-n ROWS] BINARY
package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

func main() {
	byPkg := flag.Bool("pkg", false, "sum by package rather than by module")
	rows := flag.Int("n", 0, "print only the N largest rows (0: every row of at least 16 KiB)")
	table := flag.Bool("table", false, "split the function table (.gopclntab) by module or package too")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: go run scripts/binsize.go [-pkg] [-table] [-n ROWS] BINARY (unstripped)")
		os.Exit(2)
	}
	bin := flag.Arg(0)
	inFile, pclntab := fileSections(bin)
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
		addr, err1 := strconv.ParseUint(f[0], 16, 64)
		n, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || n == 0 || !inFile(addr) {
			continue
		}
		sym := strings.Join(f[3:], " ")
		key := owner(sym, mods)
		if *byPkg {
			key = pkgOf(sym, key)
		}
		sizes[key] += n
		total += n
	}
	what := "module"
	if *byPkg {
		what = "package"
	}
	printRows(what+" (symbols)", sizes, total, *rows)
	fmt.Printf("%-56s %10.0f\n", "total symbol bytes", float64(total)/1024)
	if !*table {
		fmt.Printf("%-56s %10.0f\n", "function table (.gopclntab, not split)", float64(pclntab)/1024)
		return
	}
	key := func(fn string) string {
		k := owner(fn, mods)
		if *byPkg {
			k = pkgOf(fn, k)
		}
		return k
	}
	split, attributed := functionTable(bin, key)
	fmt.Println()
	printRows(what+" (function table)", split, attributed, *rows)
	fmt.Printf("%-56s %10.0f\n", "function table, by function", float64(attributed)/1024)
	fmt.Printf("%-56s %10.0f\n", "function table, funcdata, files and units", float64(int64(pclntab)-attributed)/1024)
}

// printRows prints the rows of sizes, largest first: the first n, or (n = 0)
// those of at least 16 KiB.
func printRows(title string, sizes map[string]int64, total int64, n int) {
	type row struct {
		key  string
		size int64
	}
	var list []row
	for k, s := range sizes {
		list = append(list, row{k, s})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].size > list[j].size })
	fmt.Printf("%-56s %10s %6s\n", title, "KiB", "share")
	for i, r := range list {
		if n > 0 && i >= n || n == 0 && r.size < 16<<10 {
			break
		}
		fmt.Printf("%-56s %10.0f %5.1f%%\n", r.key, float64(r.size)/1024, 100*float64(r.size)/float64(total))
	}
}

// functionTable splits the function table (the Go 1.20+ layout, magic
// 0xfffffff1) by the key of each function: its functab entry, its _func
// record with the pcdata and funcdata offsets, its name, and the pc-value
// tables it refers to (a table shared by several functions is counted
// once, for the first). It returns the sizes and their sum.
func functionTable(bin string, key func(fn string) string) (map[string]int64, int64) {
	f, err := elf.Open(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	sec := f.Section(".gopclntab")
	if sec == nil {
		fmt.Fprintln(os.Stderr, "no .gopclntab section")
		os.Exit(1)
	}
	d, err := sec.Data()
	le := binary.LittleEndian
	if err != nil || len(d) < 64 || le.Uint32(d) != 0xfffffff1 || d[7] != 8 {
		fmt.Fprintln(os.Stderr, "function table: not the Go 1.20+ 64-bit layout")
		os.Exit(1)
	}
	nfunc := int(le.Uint64(d[8:]))
	names := d[le.Uint64(d[8+3*8:]):]
	pctab := d[le.Uint64(d[8+6*8:]):]
	ftab := d[le.Uint64(d[8+7*8:]):]
	seen := map[uint32]bool{}
	// tableLen returns the length of the pc-value table at off: pairs of
	// uvarints (value delta, pc delta), ended by a value delta of 0 after
	// the first pair.
	tableLen := func(off uint32) int64 {
		if off == 0 || seen[off] {
			return 0
		}
		seen[off] = true
		p, i := pctab[off:], 0
		uvarint := func() uint64 {
			v, n := binary.Uvarint(p[i:])
			i += n
			return v
		}
		for first := true; ; first = false {
			if uvarint() == 0 && !first {
				return int64(i)
			}
			uvarint()
		}
	}
	sizes := map[string]int64{}
	var total int64
	for k := 0; k < nfunc; k++ {
		fn := ftab[le.Uint32(ftab[8*k+4:]):]
		name := names[le.Uint32(fn[4:]):]
		name = name[:bytes.IndexByte(name, 0)]
		npcdata, nfuncdata := int(le.Uint32(fn[28:])), int(fn[43])
		n := int64(8 + 44 + 4*npcdata + 4*nfuncdata + len(name) + 1)
		for _, o := range []int{16, 20, 24} { // pcsp, pcfile, pcln
			n += tableLen(le.Uint32(fn[o:]))
		}
		for j := 0; j < npcdata; j++ {
			n += tableLen(le.Uint32(fn[44+4*j:]))
		}
		sizes[key(string(name))] += n
		total += n
	}
	return sizes, total
}

// fileSections returns whether an address is in a section the file holds
// (not the bss), and the size of the function table.
func fileSections(bin string) (func(uint64) bool, uint64) {
	f, err := elf.Open(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	type span struct{ lo, hi uint64 }
	var spans []span
	var pclntab uint64
	for _, s := range f.Sections {
		if s.Name == ".gopclntab" {
			pclntab = s.Size
			continue
		}
		if s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_ALLOC == 0 || s.Addr == 0 {
			continue
		}
		spans = append(spans, span{s.Addr, s.Addr + s.Size})
	}
	return func(a uint64) bool {
		for _, s := range spans {
			if s.lo <= a && a < s.hi {
				return true
			}
		}
		return false
	}, pclntab
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

func trim(sym string) string {
	sym = strings.TrimPrefix(sym, "type:")
	sym = strings.TrimPrefix(sym, "go:")
	return strings.TrimPrefix(sym, "*")
}

func owner(sym string, mods []string) string {
	sym = trim(sym)
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

// pkgOf returns the import path of the package a symbol belongs to: up to
// the first dot after the path's last slash (generic instantiations'
// brackets and receivers excluded), or the module's row for the symbols
// of no package (go:func.*, type hashes...).
func pkgOf(sym, mod string) string {
	s := trim(sym)
	if i := strings.IndexAny(s, "[("); i >= 0 {
		s = s[:i]
	}
	slash := strings.LastIndex(s, "/")
	dot := strings.Index(s[slash+1:], ".")
	if dot <= 0 {
		return mod
	}
	return s[:slash+1+dot]
}
