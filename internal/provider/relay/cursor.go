package relay

import (
	"context"

	"github.com/agentbox/agentbox/event"
)

// EventsFunc reads a session's stored log: up to limit events with seq
// greater than after, in order (the host store's Events).
type EventsFunc func(ctx context.Context, after int64, limit int) ([]event.Event, error)

// tailWindow is how many events LastRelayed reads at a time, backwards
// from the log's end.
const tailWindow = 256

// LastRelayed returns the inner seq of the last relayed event of a
// session's stored log (InnerSeq of its raw field), 0 when there is none:
// a resumed relay's cursor. It reads backwards from the log's end, never
// the whole log: the last seq is found with about 2·log2(n) reads of one
// event (a log's seqs start at 1 and have no gaps), then windows of
// tailWindow events are read from the end until one holds a relayed event.
// What follows the last relayed event is the host's own bookkeeping of a
// few turns (a restart, the turns it settled), so that is one window.
func LastRelayed(ctx context.Context, events EventsFunc) (int64, error) {
	last, err := lastSeq(ctx, events)
	if err != nil {
		return 0, err
	}
	for last > 0 {
		from := max(0, last-tailWindow)
		evs, err := events(ctx, from, int(last-from))
		if err != nil {
			return 0, err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Seq > last {
				continue // appended since the log's end was found
			}
			if seq, ok := InnerSeq(evs[i].Raw); ok {
				return seq, nil
			}
		}
		last = from
	}
	return 0, nil
}

// lastSeq returns the seq of a log's last event (0 when it is empty):
// doubling while seq n exists, then bisecting.
func lastSeq(ctx context.Context, events EventsFunc) (int64, error) {
	exists := func(seq int64) (bool, error) {
		evs, err := events(ctx, seq-1, 1)
		return len(evs) > 0, err
	}
	lo, hi := int64(0), int64(1) // seq lo exists (0: trivially), hi is to be tried
	for {
		ok, err := exists(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 { // lo exists, hi does not
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}
