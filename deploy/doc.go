// Package deploy holds what a release ships besides the binary: the
// systemd unit (agentbox.service), the install script (install.sh) and the
// container file (Containerfile), which scripts/release copies into dist/.
// Its tests build every release target and check those files.
package deploy
