#!/usr/bin/env bash
# Installs agentbox: the binary to /usr/local/bin/agentbox, the systemd unit
# to /etc/systemd/system/agentbox.service, the data directory
# /var/lib/agentbox (0700) and, if there is none, a configuration file
# /etc/agentbox/agentbox.yaml (0600). Safe to run again: what is already in
# place is left as it is, an existing configuration is never overwritten,
# and the binary is replaced (atomically) only when it differs.
#
#   install.sh DIST_DIR                  the binary for this machine from a `make release`
#                                        directory, checked against its SHA256SUMS
#   install.sh BINARY --sha256 HEX       a binary, checked against HEX
#   install.sh BINARY                    a binary with a SHA256SUMS beside it naming it
#
# Options: --destdir DIR installs under DIR (staging, packaging, tests; no
# systemctl); --enable enables and starts the service.
# The checksum is not optional: a binary that does not match is refused.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
die() { echo "install.sh: $*" >&2; exit 1; }

src="" sum="" destdir="" enable=0
while (($#)); do
  case $1 in
    --sha256) sum=${2:?--sha256 HEX}; shift 2 ;;
    --destdir) destdir=${2:?--destdir DIR}; shift 2 ;;
    --enable) enable=1; shift ;;
    -h|--help) usage ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$src" ] || die "one BINARY or DIST_DIR only"; src=$1; shift ;;
  esac
done
[ -n "$src" ] || usage
here=$(cd "$(dirname "$0")" && pwd)

if [ -d "$src" ]; then
  case $(uname -m) in
    x86_64|amd64) arch=amd64 ;;
    aarch64|arm64) arch=arm64 ;;
    *) die "no agentbox daemon is built for $(uname -m)" ;;
  esac
  [ "$(uname -s)" = Linux ] || die "the daemon runs on Linux only"
  bin="$src/agentbox-linux-$arch"
  [ -f "$bin" ] || die "$bin: no such file (is $src a \`make release\` directory?)"
else
  bin=$src
  [ -f "$bin" ] || die "$bin: no such file"
fi
if [ -z "$sum" ]; then
  sums="$(dirname "$bin")/SHA256SUMS"
  [ -f "$sums" ] || die "no checksum: give --sha256 HEX, or keep SHA256SUMS beside $bin"
  sum=$(awk -v f="$(basename "$bin")" '$2 == f || $2 == "*" f {print $1}' "$sums")
  [ -n "$sum" ] || die "$sums has no line for $(basename "$bin")"
fi
[[ $sum =~ ^[0-9a-fA-F]{64}$ ]] || die "--sha256: want 64 hex digits"
got=$(sha256sum "$bin" | cut -d' ' -f1)
[ "${got,,}" = "${sum,,}" ] || die "$bin: sha256 $got, want $sum: refusing to install it"

# The unit comes from beside this script (deploy/ or a release directory).
unit="$here/agentbox.service"
[ -f "$unit" ] || die "$unit: no such file"

root=${destdir%/}
install -d -m 0755 "$root/usr/local/bin" "$root/etc/systemd/system"
install -d -m 0700 "$root/var/lib/agentbox" "$root/etc/agentbox"

target="$root/usr/local/bin/agentbox"
if [ -f "$target" ] && cmp -s "$bin" "$target"; then
  echo "install.sh: $target is up to date" >&2
else
  # A new file renamed into place: a running daemon keeps its old binary.
  install -m 0755 "$bin" "$target.new.$$"
  mv -f "$target.new.$$" "$target"
  echo "install.sh: installed $target" >&2
fi

if ! cmp -s "$unit" "$root/etc/systemd/system/agentbox.service"; then
  install -m 0644 "$unit" "$root/etc/systemd/system/agentbox.service"
  echo "install.sh: installed $root/etc/systemd/system/agentbox.service" >&2
fi

conf="$root/etc/agentbox/agentbox.yaml"
if [ ! -e "$conf" ]; then
  (umask 077; cat > "$conf" <<'YAML'
# agentbox serve configuration: keys are the flags of `agentbox serve --help`.
# A flag on the command line, then an AGENTBOX_* variable, win over this file.
listen: 127.0.0.1:7777
data-dir: /var/lib/agentbox
# session-policy: agent-default
# log-format: json
YAML
  )
  echo "install.sh: wrote $conf" >&2
fi

if [ -z "$root" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  if ((enable)); then
    systemctl enable --now agentbox.service
  else
    echo "install.sh: start it with: systemctl enable --now agentbox" >&2
  fi
fi
