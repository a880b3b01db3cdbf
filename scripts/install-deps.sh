#!/bin/sh
# Install the Debian packages vramplan needs, only those that are missing.
#   install-deps.sh run   — building and running: C toolchain, Lua 5.4, LuaFileSystem, dkjson, lua-yaml (libyaml),
#                           lua-argparse (the command line)
#   install-deps.sh test  — the above plus busted, Debian's PyTorch, Chromium (which renders the
#                           HTML report headless) and clang with its libFuzzer and sanitizer
#                           runtimes (the fuzz target, make fuzz-short) for the test suite
set -e
need="gcc make pkg-config liblua5.4-dev lua5.4 lua-filesystem lua-dkjson lua-yaml lua-argparse"
[ "$1" = test ] && need="$need lua-busted python3-torch chromium clang libclang-rt-14-dev"
missing=""
for p in $need; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO=sudo; else
    echo "missing packages:$missing — install them as root (apt-get install$missing)" >&2; exit 1
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
