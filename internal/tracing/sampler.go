package tracing

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
)

// sampler decides whether a new span is recorded (OTEL_TRACES_SAMPLER).
type sampler struct {
	// root decides for a span without a parent (and for every span
	// unless parentBased): all, none, or the trace ids below bound.
	root samplerRoot
	// bound: a trace id is sampled when its last 8 bytes, shifted right
	// by one, are below bound (the OTel SDK's TraceIDRatioBased).
	bound uint64
	// parentBased follows a valid parent's sampled flag.
	parentBased bool
}

type samplerRoot uint8

const (
	rootAlways samplerRoot = iota
	rootNever
	rootRatio
)

func (s sampler) sample(parent SpanContext, tid TraceID) bool {
	if s.parentBased && parent.IsValid() {
		return parent.Sampled()
	}
	switch s.root {
	case rootAlways:
		return true
	case rootNever:
		return false
	}
	return binary.BigEndian.Uint64(tid[8:])>>1 < s.bound
}

// parseSampler reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (the
// ratio of the traceidratio samplers, default 1).
func parseSampler(name, arg string) (sampler, error) {
	switch name {
	case "", "parentbased_always_on":
		return sampler{root: rootAlways, parentBased: true}, nil
	case "always_on":
		return sampler{root: rootAlways}, nil
	case "always_off":
		return sampler{root: rootNever}, nil
	case "parentbased_always_off":
		return sampler{root: rootNever, parentBased: true}, nil
	case "traceidratio", "parentbased_traceidratio":
		ratio := 1.0
		if arg != "" {
			r, err := strconv.ParseFloat(arg, 64)
			if err != nil || math.IsNaN(r) || r < 0 || r > 1 {
				return sampler{}, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
			}
			ratio = r
		}
		s := sampler{root: rootRatio, parentBased: name == "parentbased_traceidratio"}
		switch {
		case ratio >= 1:
			s.root = rootAlways
		case ratio <= 0:
			s.root = rootNever
		default:
			s.bound = uint64(ratio * (1 << 63))
		}
		return s, nil
	}
	return sampler{}, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}
