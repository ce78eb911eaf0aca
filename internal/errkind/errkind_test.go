package errkind_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/agentbox/agentbox/internal/errkind"
)

func TestKinds(t *testing.T) {
	errMissing := errkind.New(errkind.NotFound, "session not found")
	tests := []struct {
		name string
		err  error
		want *errkind.Kind
	}{
		{"sentinel", errMissing, errkind.NotFound},
		{"wrapped sentinel", fmt.Errorf("session ses_1: %w", errMissing), errkind.NotFound},
		{"wrap", errkind.Wrap(errkind.StorageFull, fs.ErrClosed), errkind.StorageFull},
		{"kind itself", fmt.Errorf("x: %w", errkind.Conflict), errkind.Conflict},
		{"no kind", errors.New("boom"), nil},
		{"nil", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := errkind.Of(tc.err); got != tc.want {
				t.Fatalf("Of = %v, want %v", got, tc.want)
			}
		})
	}
	if w := errkind.Wrap(errkind.StorageFull, fs.ErrClosed); !errors.Is(w, fs.ErrClosed) || w.Error() != fs.ErrClosed.Error() {
		t.Fatalf("Wrap lost its error: %v", w)
	}
	if errors.Is(errMissing, errkind.New(errkind.NotFound, "session not found")) {
		t.Fatal("two sentinels with one text must stay distinct")
	}
}
