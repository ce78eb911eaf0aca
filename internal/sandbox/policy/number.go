package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sprintf is fmt.Sprintf with its int and float64 arguments written as
// the reference validator's messages write them (x/text's English
// number formatting, which this replaces at a fraction of its size):
// thousands grouped ("65,536"), exponents as "1.5×10⁻⁰⁷", infinities
// as "∞". TestNumberFormat holds it to that formatting.
func sprintf(format string, args ...any) string {
	for i, a := range args {
		switch v := a.(type) {
		case int:
			args[i] = formatted(group(strconv.Itoa(v)))
		case float64:
			args[i] = formatted(formatFloat(v))
		}
	}
	return fmt.Sprintf(format, args...)
}

// formatted prints as itself under any verb.
type formatted string

func (s formatted) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s)) }

var superscript = strings.NewReplacer("0", "⁰", "1", "¹", "2", "²", "3", "³", "4", "⁴",
	"5", "⁵", "6", "⁶", "7", "⁷", "8", "⁸", "9", "⁹", "-", "⁻", "+", "")

func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "∞"
	case math.IsInf(f, -1):
		return "-∞"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if m, e, ok := strings.Cut(s, "e"); ok {
		return group(m) + "×10" + superscript.Replace(e)
	}
	return group(s)
}

// group puts a comma between each three digits of a decimal's integer
// part.
func group(s string) string {
	sign, digits := "", s
	if strings.HasPrefix(s, "-") {
		sign, digits = "-", s[1:]
	}
	whole, frac, hasFrac := strings.Cut(digits, ".")
	if len(whole) <= 3 || strings.ContainsFunc(whole, func(r rune) bool { return r < '0' || r > '9' }) {
		return s
	}
	var b strings.Builder
	b.WriteString(sign)
	for i := range len(whole) {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(whole[i])
	}
	if hasFrac {
		b.WriteString("." + frac)
	}
	return b.String()
}
