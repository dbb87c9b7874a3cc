#!/bin/sh
# Install Debian's headless Chromium and its WebDriver for tests/test_browser.py, if they are missing.
set -eu
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    echo "chromium and chromedriver already installed: $(chromium --version 2>/dev/null || echo chromium)"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver fonts-dejavu-core
chromium --version
