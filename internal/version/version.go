// Package version holds the binary's version, set at link time by
// scripts/build, and what it knows of its own build (commit, Go version,
// build tags).
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
)

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

// Info is what the binary knows of its own build.
type Info struct {
	Version   string   `json:"version"`
	Commit    string   `json:"commit,omitempty"`   // the VCS revision it was built from
	Modified  bool     `json:"modified,omitempty"` // built from a tree with uncommitted changes
	GoVersion string   `json:"go_version"`
	Tags      []string `json:"tags,omitempty"` // build tags (-tags)
}

// Build returns the version and what the build info says of the build.
func Build() Info {
	in := Info{Version: String(), GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		case "-tags":
			if s.Value != "" {
				in.Tags = strings.Split(s.Value, ",")
			}
		}
	}
	return in
}

// Details is the build in one line, without the version: "go1.26.8,
// commit 0123456789ab (modified), tags nethttpomithttp2".
func (in Info) Details() string {
	parts := []string{in.GoVersion}
	if in.Commit != "" {
		c := in.Commit[:min(12, len(in.Commit))]
		if in.Modified {
			c += " (modified)"
		}
		parts = append(parts, "commit "+c)
	}
	if len(in.Tags) > 0 {
		parts = append(parts, "tags "+strings.Join(in.Tags, ","))
	}
	return strings.Join(parts, ", ")
}
