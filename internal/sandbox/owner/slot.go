package owner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Slot is a numbered slot of a pool, held host-wide by this process until
// Release or until the process ends.
type Slot struct {
	N    int
	host *Host
	pool string
}

// ErrNoSlot is returned (wrapped) when every slot of a pool is held.
var ErrNoSlot = errors.New("owner: every slot is in use")

// Slot takes the lowest slot of pool (0 to n-1) that no process on the
// host holds. Holding it is an exclusive flock on its file, so a process
// that dies frees its slots whatever way it dies.
func (h *Host) Slot(pool string, n int) (*Slot, error) {
	dir, err := h.ensureSlotDir(pool)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	held := h.slots[pool]
	if held == nil {
		held = map[int]*os.File{}
		h.slots[pool] = held
	}
	for i := range n {
		if held[i] != nil {
			continue // ours already
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(i)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("owner: slot %s/%d: %w", pool, i, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue // another process holds it
			}
			return nil, fmt.Errorf("owner: lock slot %s/%d: %w", pool, i, err)
		}
		held[i] = f
		return &Slot{N: i, host: h, pool: pool}, nil
	}
	return nil, fmt.Errorf("%w: all %d slots of %s are held", ErrNoSlot, n, pool)
}

func (h *Host) ensureSlotDir(pool string) (string, error) {
	if pool == "" || pool != filepath.Base(pool) || pool[0] == '.' {
		return "", fmt.Errorf("owner: invalid slot pool %q", pool)
	}
	if _, err := h.ensureDir("slots"); err != nil {
		return "", err
	}
	return h.ensureDir(filepath.Join("slots", pool))
}

// Release frees the slot. Safe on nil and twice.
func (s *Slot) Release() {
	if s == nil || s.host == nil {
		return
	}
	h := s.host
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.slots[s.pool][s.N]; f != nil {
		f.Close() // drops the lock
		delete(h.slots[s.pool], s.N)
	}
	s.host = nil
}
