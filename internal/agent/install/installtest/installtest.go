// Package installtest is a test double for npm, for tests of code that
// installs agents with package install: a shell script named npm that acts
// like `npm install --prefix DIR PKG@VERSION` just enough, without a network.
package installtest

import (
	"os"
	"path/filepath"
	"testing"
)

// Environment variables the fake npm reads when it runs (set them in the
// environment of the process that calls install).
const (
	// EnvLog names a file that gets one line per invocation: the arguments.
	EnvLog = "FAKE_NPM_LOG"
	// EnvMode picks the outcome: "" installs; "etarget", "e404", "offline"
	// and "fail" print npm's error for that case and exit 1; "nobin"
	// succeeds without creating the binary.
	EnvMode = "FAKE_NPM_MODE"
	// EnvBin is the binary to create, relative to --prefix (default
	// node_modules/.bin/fake).
	EnvBin = "FAKE_NPM_BIN"
	// EnvPrints is what the binary echoes (default "fake 1.0.0"). It is put
	// in double quotes in the script, so $VARS expand when the binary runs.
	EnvPrints = "FAKE_NPM_PRINTS"
	// EnvExit is the binary's exit status (default 0).
	EnvExit = "FAKE_NPM_EXIT"
	// EnvBinSleep makes the binary sleep that many seconds first.
	EnvBinSleep = "FAKE_NPM_BIN_SLEEP"
	// EnvSleep makes npm itself sleep that many seconds before installing.
	EnvSleep = "FAKE_NPM_SLEEP"
)

const script = `#!/bin/sh
# Test double for npm (see package installtest).
[ -n "$FAKE_NPM_LOG" ] && echo "$*" >> "$FAKE_NPM_LOG"
prefix=
pkg=
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift ;;
    --prefix=*) prefix=${1#--prefix=} ;;
    -*) ;;
    *) pkg=$1 ;;
  esac
  shift
done
case "$FAKE_NPM_MODE" in
  etarget)
    echo "npm error code ETARGET" >&2
    echo "npm error notarget No matching version found for $pkg." >&2
    echo "npm error A complete log of this run can be found in: /nowhere/debug-0.log" >&2
    exit 1 ;;
  e404)
    echo "npm error code E404" >&2
    echo "npm error 404 Not Found - GET https://registry.invalid/$pkg - Not found" >&2
    exit 1 ;;
  offline)
    echo "npm error code ECONNREFUSED" >&2
    echo "npm error syscall connect" >&2
    echo "npm error FetchError: request to https://registry.invalid/fake failed, reason: connect ECONNREFUSED 127.0.0.1:1" >&2
    echo "npm error     at ClientRequest.<anonymous> (/usr/lib/node_modules/npm/index.js:1:1)" >&2
    exit 1 ;;
  fail)
    echo "npm error code EACCES" >&2
    echo "npm error something else went wrong" >&2
    exit 1 ;;
esac
[ -n "$prefix" ] || { echo "fake npm: no --prefix" >&2; exit 2; }
sleep "${FAKE_NPM_SLEEP:-0}"
echo "fake npm: installing $pkg" >&2
mkdir -p "$prefix/node_modules/.bin"
if [ "$FAKE_NPM_MODE" != nobin ]; then
  bin="$prefix/${FAKE_NPM_BIN:-node_modules/.bin/fake}"
  mkdir -p "$(dirname "$bin")"
  {
    echo '#!/bin/sh'
    echo "sleep ${FAKE_NPM_BIN_SLEEP:-0}"
    printf 'echo "%s"\n' "${FAKE_NPM_PRINTS:-fake 1.0.0}"
    echo "exit ${FAKE_NPM_EXIT:-0}"
  } > "$bin"
  chmod +x "$bin"
fi
echo "added 1 package in 0s"
`

// FakeNPM writes the fake npm into a new temporary directory and returns
// the directory, to be put first on PATH.
func FakeNPM(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "npm"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
