#!/usr/bin/env bash
# Headless Chromium for the browser tests (the report page and the attention view:
# tests/e2e/test_report_browser.py, tests/e2e/test_attention_view_browser.py), set up by
# `scripts/bootstrap.sh test`, so the README's test command and CI (.ci/run) run the same tests.
#
# Looks where the tests look (tests/e2e/test_report_browser.py's chromium_binary: $HEADLENS_CHROMIUM,
# /usr/bin/chromium, chromium, chromium-browser or google-chrome on PATH); when none is there,
# installs Debian's `chromium` with apt-get, as root or through password-less sudo.  Idempotent and
# quiet.  Never fails: where it cannot install (no apt-get, not root and no password-less sudo, no
# package index), it says on stderr how to get one, and the browser tests skip with the same words.
set -uo pipefail
# Where Debian's package puts the binary (a test points it elsewhere to play a machine without it).
DEBIAN_CHROMIUM=${DEBIAN_CHROMIUM:-/usr/bin/chromium}
HOW="install Debian's chromium (as root: apt-get install chromium), or point \$HEADLENS_CHROMIUM at a Chromium or Chrome binary"

found() {
  local candidate
  for candidate in "${HEADLENS_CHROMIUM:-}" "$DEBIAN_CHROMIUM" \
    "$(command -v chromium)" "$(command -v chromium-browser)" "$(command -v google-chrome)"; do
    if [ -n "$candidate" ] && [ -f "$candidate" ] && [ -x "$candidate" ]; then return 0; fi
  done
  return 1
}

found && exit 0
if [ "$(id -u)" = 0 ]; then
  as_root() { "$@"; }
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  as_root() { sudo -n "$@"; }
else
  echo "chromium.sh: no Chromium, and not root (nor password-less sudo) to install it: the browser tests will skip; $HOW" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium.sh: no Chromium, and no apt-get to install it: the browser tests will skip; $HOW" >&2
  exit 0
fi
if ! { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 || ! found; then
  echo "chromium.sh: could not install chromium with apt-get (offline, or no such package here): the browser tests will skip; $HOW" >&2
fi
exit 0
