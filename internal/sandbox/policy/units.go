package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// ByteSize is a number of bytes, written as an integer or with a unit
// ("512Mi", "1G"). It prints with the largest binary unit that divides it.
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"K", 1e3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1},
}

// ParseByteSize parses "536870912", "512Mi", "1.5Gi" or "100M".
func ParseByteSize(s string) (ByteSize, error) {
	num, mult := s, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	if num == "" || strings.ContainsAny(num, "+-eE_ ") {
		return 0, fmt.Errorf("%q is not a size (use bytes or a number with Ki, Mi, Gi, Ti, K, M, G or T)", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%q is not a size (use bytes or a number with Ki, Mi, Gi, Ti, K, M, G or T)", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	if !n.IsInt64() || n.Sign() < 0 {
		return 0, fmt.Errorf("size %q is out of range", s)
	}
	return ByteSize(n.Int64()), nil
}

func (b ByteSize) String() string {
	if b <= 0 {
		return strconv.FormatInt(int64(b), 10)
	}
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// MarshalYAML writes "512Mi", or a plain integer when no unit fits.
func (b ByteSize) MarshalYAML() (any, error) {
	s := b.String()
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	return s, nil
}

// UnmarshalText reads a size from YAML (a number or a string).
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

func (b ByteSize) MarshalJSON() ([]byte, error) {
	v, _ := b.MarshalYAML()
	return json.Marshal(v)
}

// UnmarshalJSON reads a JSON number or string.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	var s string
	if len(data) > 0 && data[0] == '"' {
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
	} else {
		s = string(data)
	}
	return b.UnmarshalText([]byte(s))
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

// ParseDuration parses a non-negative Go duration.
func ParseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (use e.g. 500ms, 30s, 10m, 2h)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	return Duration(d), nil
}

// String drops the zero tails time.Duration prints ("2h" not "2h0m0s").
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Duration) UnmarshalText(text []byte) error {
	v, err := ParseDuration(string(text))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// minLimit is the tighter of two limits where zero means "no limit".
func minLimit[T int64 | float64 | ByteSize | Duration](a, b T) T {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

var errNaN = errors.New("not a finite number")

func checkFinite(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return errNaN
	}
	return nil
}
