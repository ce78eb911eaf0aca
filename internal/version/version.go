// Package version holds the daemon's version, set at link time by
// scripts/build, and the API protocol version clients can gate features on.
package version

import "runtime/debug"

// Version is the release version; scripts/build sets it with -X.
var Version = ""

// String returns Version, or the module version from the build info, or
// "dev".
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
