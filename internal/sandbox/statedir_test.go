package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		p, dir string
		want   bool
	}{
		{"/a", "/a", true},
		{"/a/b", "/a", true},
		{"/ab", "/a", false},
		{"/a", "/a/b", false},
		{"/a", "/", true},
		{"/", "/", true},
		{"/", "/a", false},
	} {
		if got := Within(tc.p, tc.dir); got != tc.want {
			t.Errorf("Within(%q, %q) = %v, want %v", tc.p, tc.dir, got, tc.want)
		}
	}
}

func TestCheckStateDirs(t *testing.T) {
	base := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ws, home, file := mk("ws"), mk("home"), filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	inside := mk("ws/sub")
	for _, tc := range []struct {
		name, dir, wsDir, wantErr string
	}{
		{name: "a home beside the workspace", dir: home + "/"},
		{name: "relative", dir: "home", wantErr: "must be absolute"},
		{name: "root", dir: "/", wantErr: "overlaps the workspace"},
		{name: "the workspace", dir: ws, wantErr: "overlaps the workspace"},
		{name: "inside the workspace", dir: inside, wantErr: "overlaps the workspace"},
		{name: "around the workspace", dir: base, wantErr: "overlaps the workspace"},
		{name: "around the workspace dir", dir: home, wsDir: home + "/inner", wantErr: "overlaps the workspace"},
		{name: "missing", dir: filepath.Join(base, "missing"), wantErr: "is not a directory"},
		{name: "a file", dir: file, wantErr: "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := Spec{Workspace: ws, WorkspaceDir: tc.wsDir, StateDirs: []string{tc.dir}}
			err := CheckStateDirs(&spec)
			if tc.wantErr == "" {
				if err != nil || spec.StateDirs[0] != filepath.Clean(tc.dir) {
					t.Errorf("CheckStateDirs: %v, state dirs %v", err, spec.StateDirs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("CheckStateDirs: %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestStateRoom(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))), make([]byte, 8192), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	page := int64(os.Getpagesize())
	for _, tc := range []struct {
		name        string
		l           Limits
		bytes, file int64
	}{
		{name: "no limits", l: Limits{MemoryBytes: 1}, bytes: 0, file: 0},
		{name: "room left", l: Limits{DiskBytes: 1 << 20, Files: 10}, bytes: 1<<20 - 3*8192, file: 7},
		{name: "at the limits", l: Limits{DiskBytes: 3 * 8192, Files: 3}, bytes: page, file: 1},
		{name: "past the limits", l: Limits{DiskBytes: 1, Files: 1}, bytes: page, file: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			room, err := StateRoom(dir, tc.l)
			if err != nil {
				t.Fatal(err)
			}
			if room.DiskBytes != tc.bytes || room.Files != tc.file || room.MemoryBytes != tc.l.MemoryBytes {
				t.Errorf("StateRoom = %+v, want disk %d, files %d, the rest as given", room, tc.bytes, tc.file)
			}
		})
	}
	if got := TmpfsInodes(0, InodesUpper); got != 0 {
		t.Errorf("TmpfsInodes(no limit) = %d", got)
	}
	if got := TmpfsInodes(10, InodesUpper); got != 10+InodesUpper {
		t.Errorf("TmpfsInodes(10) = %d", got)
	}
}
