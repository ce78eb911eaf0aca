package execution

import (
	"slices"
	"sync"
)

// Process event types.
const (
	EventStdout  = Stdout
	EventStderr  = Stderr
	EventDropped = "dropped" // output dropped from the buffer before it was read
	EventExit    = "exit"    // the process ended; always the last event
)

// Event is one entry of a process's output log.
type Event struct {
	// Seq numbers the events of a process from 1. A dropped event carries
	// the seq of the last event it stands for, so that resuming after it
	// continues with the first event still kept.
	Seq  int64
	Type string
	// Data is the output of a stdout or stderr event.
	Data []byte
	// Offset is the number of output bytes (both streams) the process
	// wrote before Data, so a reader can tell how much a gap cost it.
	Offset int64
	// Gap is set on dropped events.
	Gap *Gap
	// Exit is set on the exit event.
	Exit *ProcessInfo
}

// Gap is a range of output events no longer kept.
type Gap struct{ FromSeq, ToSeq int64 }

// ring is a process's output log, bounded in bytes: when full, the oldest
// output events are dropped (and reported as a gap to readers that had not
// seen them). Readers wait on wake, which is closed and replaced on every
// change.
type ring struct {
	max int

	mu      sync.Mutex
	events  []Event // kept events, seq ascending and contiguous
	size    int     // bytes of Data in events
	next    int64   // seq of the next event
	dropSeq int64   // highest seq dropped, 0 if none
	offset  int64   // output bytes added so far
	ended   bool
	wake    chan struct{}
}

func newRing(max int) *ring { return &ring{max: max, next: 1, wake: make(chan struct{})} }

// add appends an output event, dropping old ones beyond the bound. A
// chunk larger than the whole buffer keeps only its end.
func (r *ring) add(typ string, data []byte) {
	if len(data) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	off := r.offset
	r.offset += int64(len(data))
	if len(data) > r.max {
		off += int64(len(data) - r.max)
		data = data[len(data)-r.max:]
	}
	for len(r.events) > 0 && r.size+len(data) > r.max {
		old := r.events[0]
		r.events[0] = Event{}
		r.events = r.events[1:]
		r.size -= len(old.Data)
		r.dropSeq = old.Seq
	}
	r.events = append(r.events, Event{Seq: r.next, Type: typ, Data: slices.Clone(data), Offset: off})
	r.size += len(data)
	r.next++
	r.notifyLocked()
}

// end appends the exit event; nothing is added after it.
func (r *ring) end(info ProcessInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	info.LastSeq = r.next
	r.events = append(r.events, Event{Seq: r.next, Type: EventExit, Exit: &info, Offset: r.offset})
	r.next++
	r.ended = true
	r.notifyLocked()
}

func (r *ring) notifyLocked() {
	close(r.wake)
	r.wake = make(chan struct{})
}

// lastSeq is the seq of the last event added (0 when none).
func (r *ring) lastSeq() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next - 1
}

// since returns the events after seq after, preceded by a dropped event
// when some of them are gone; done reports that nothing will follow (the
// exit event is among them or was before after); wake is closed when more
// arrive.
func (r *ring) since(after int64) (evs []Event, done bool, wake <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if after < r.dropSeq {
		evs = append(evs, Event{Seq: r.dropSeq, Type: EventDropped, Gap: &Gap{FromSeq: after + 1, ToSeq: r.dropSeq}})
		after = r.dropSeq
	}
	i, _ := slices.BinarySearchFunc(r.events, after+1, func(e Event, seq int64) int { return int(e.Seq - seq) })
	evs = append(evs, r.events[i:]...)
	return evs, r.ended, r.wake
}
