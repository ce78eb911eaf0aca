//go:build unix

package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the symbolic links privateRoot follows.
const maxLinks = 40

// privateRoot resolves dir, the host side of a state directory
// (Options.Private), and checks that nobody but root and this process's
// user can change which directory it is, nor its entries: every directory
// on the way is owned by one of them and not writable by others (a sticky
// one, like /tmp, may be: others cannot rename our entries in it), every
// symbolic link on the way is owned by one of them (and lies in such a
// directory), dir itself is no symbolic link, is ours and not writable by
// others. A state directory is written back as the daemon's user, and a
// home another user could swap for a link to anywhere would be a write
// anywhere. It returns the path with no symbolic link in it, for the
// caller to open with O_NOFOLLOW.
func privateRoot(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("workspace: state directory %q is not absolute", dir)
	}
	euid := os.Geteuid()
	ours := func(uid uint32) bool { return uid == 0 || int(uid) == euid }
	var st unix.Stat_t
	if err := unix.Lstat("/", &st); err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	if !ours(st.Uid) || st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return "", errors.New("workspace: / may be changed by other users")
	}
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(dir), "/"), "/")
	cur := "/"
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" {
			continue
		}
		next := filepath.Join(cur, name)
		if err := unix.Lstat(next, &st); err != nil {
			return "", fmt.Errorf("workspace: state directory %s: %w", dir, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if len(rest) == 0 {
				return "", fmt.Errorf("workspace: state directory %s is a symbolic link", dir)
			}
			if !ours(st.Uid) {
				return "", fmt.Errorf("workspace: state directory %s: %s is another user's symbolic link", dir, next)
			}
			if links++; links > maxLinks {
				return "", fmt.Errorf("workspace: state directory %s: too many symbolic links", dir)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", fmt.Errorf("workspace: %w", err)
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			// Walk the target from /, then what was left: every
			// directory it passes through is checked in turn.
			rest = append(strings.Split(strings.TrimPrefix(filepath.Clean(target), "/"), "/"), rest...)
			cur = "/"
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return "", fmt.Errorf("workspace: state directory %s: %s is not a directory", dir, next)
		}
		if len(rest) == 0 {
			if int(st.Uid) != euid || st.Mode&0o022 != 0 {
				return "", fmt.Errorf("workspace: state directory %s must be owned by uid %d and writable by it alone", dir, euid)
			}
		} else if !ours(st.Uid) || st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return "", fmt.Errorf("workspace: state directory %s: %s may be changed by other users", dir, next)
		}
		cur = next
	}
	return cur, nil
}
