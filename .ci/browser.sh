#!/usr/bin/env bash
# Headless Chromium for the report.html tests (tests/browser.py opens the page as a signer would):
# Debian's `chromium` package, installed where it is missing and the machine allows it (root, or
# sudo without a password). Where it does not, this says what to install and goes on: the browser
# tests then skip, except under CI=true, where they fail (CI must run them).
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then
        exit 0
    fi
done
install=(apt-get install -y --no-install-recommends chromium)
if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -q && DEBIAN_FRONTEND=noninteractive "${install[@]}" && exit 0
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n apt-get update -q && sudo -n env DEBIAN_FRONTEND=noninteractive "${install[@]}" && exit 0
    fi
fi
echo "browser.sh: chromium is missing and could not be installed here; install Debian's chromium" \
     "(sudo ${install[*]}). The report.html browser tests skip without it (with CI=true they fail)." >&2
