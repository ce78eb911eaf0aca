package policy

import (
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer is the reference validator's message printer (its
// LocalizedString in schema_test.go) and the formatting sprintf matches.
var printer = message.NewPrinter(language.English)

// TestNumberFormat: sprintf writes ints and floats as x/text's English
// printer does, for chosen and random values.
func TestNumberFormat(t *testing.T) {
	floats := []float64{0, 0.5, -3, 1000, 65536, 1e6, 1234567.891, 1e21, 1e-7, 0.000123, 12345.678901234,
		1e5, 999999, 1e15, 123456789, 0.0001, 1.5e-5, -1e6, -1234.5, math.Inf(1), math.Inf(-1), math.NaN(), 1e300, 5e-324}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		floats = append(floats, math.Float64frombits(r.Uint64()), float64(r.Int64N(1<<(r.IntN(60)+1))), r.Float64()*math.Pow(10, float64(r.IntN(40)-20)))
	}
	for _, f := range floats {
		if got, want := sprintf("got %v, want %v", f, f), printer.Sprintf("got %v, want %v", f, f); got != want {
			t.Errorf("%v: %q, want %q", f, got, want)
		}
	}
	for _, n := range []int{0, 5, 999, 1000, -1000, 12345, -1234567, 1 << 40, math.MaxInt64, math.MinInt64} {
		if got, want := sprintf("maxItems: got %d, want %d", n, n), printer.Sprintf("maxItems: got %d, want %d", n, n); got != want {
			t.Errorf("%d: %q, want %q", n, got, want)
		}
	}
	if got, want := sprintf("%s does not match pattern %s", `"a"`, `"^b$"`), printer.Sprintf("%s does not match pattern %s", `"a"`, `"^b$"`); got != want {
		t.Errorf("strings: %q, want %q", got, want)
	}
}
