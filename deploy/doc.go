// Package deploy holds what a release ships besides the binary: the
// systemd unit (agentbox.service), the install script (install.sh) and the
// container file (Containerfile), which scripts/release copies into dist/.
// Its tests run scripts/release, check those files with the real tools
// (systemd-analyze, install.sh into a staging root) and build and run the
// container image through the private dockerd of scripts/dockerd.
package deploy
