#!/usr/bin/env bash
# Builds spead2's C++ command-line tools (spead2_send, spead2_recv) from the
# PyPI source distribution, for the ingest throughput comparison
# (bench/ingest_compare.sh). PyPI's spead2 wheels ship only the Python
# versions of these tools, which are far slower than the C++ ones.
#
# Usage: bench/spead2/build.sh            (as root, or with sudo available)
# Env:   SPEAD2_VERSION (default 4.5.1), SPEAD2_BUILD_DIR (default bench/spead2/build)
#        SKIP_APT=1 to skip the Debian package step.
# Result: $SPEAD2_BUILD_DIR/bin/spead2_send and spead2_recv (UDP GSO/GRO where
#         the kernel offers them) and bin-nogso/ (built without GSO/GRO;
#         SPEAD2_NO_GSO_VARIANT=0 skips it).
# Everything lands in the build directory, which git ignores; no spead2
# code is kept in the frameloop repository.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${SPEAD2_VERSION:-4.5.1}"
build_dir="${SPEAD2_BUILD_DIR:-$here/build}"
jobs="${JOBS:-$(nproc)}"
started=$(date +%s)

if [[ "${SKIP_APT:-0}" != 1 ]]; then
    sudo_cmd=()
    [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
    # Boost.Asio/System headers and program_options (tools), libdivide (fast
    # division in the receiver), libpcap (pcap reader), libcap (capabilities
    # for ibverbs), a C++17 compiler, pkg-config and python3-venv for the
    # meson/jinja2 toolchain below.
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
        build-essential pkg-config python3-venv \
        libboost-dev libboost-program-options-dev libboost-system-dev \
        libdivide-dev libpcap-dev libcap-dev
fi

mkdir -p "$build_dir"
cd "$build_dir"

# A private Python environment for the build tools: spead2 needs a recent
# meson, and its code generators import jinja2, pycparser and packaging.
if [[ ! -x venv/bin/meson ]]; then
    python3 -m venv venv
    venv/bin/pip install -q --upgrade pip
    venv/bin/pip install -q 'meson>=1.2' ninja jinja2 pycparser packaging
fi
export PATH="$build_dir/venv/bin:$PATH"

src="spead2-$version"
if [[ ! -d "$src" ]]; then
    rm -rf sdist && mkdir sdist
    # The source distribution comes from PyPI's simple index (the API pip
    # itself reads), checked against the sha256 the index publishes. `pip
    # download --no-binary` would work too, but it builds the whole Python
    # extension just to read the package metadata, which doubles the build time.
    python3 - "$version" sdist <<'PY'
import hashlib, re, sys, urllib.request
version, dest = sys.argv[1], sys.argv[2]
name = f"spead2-{version}.tar.gz"
index = urllib.request.urlopen("https://pypi.org/simple/spead2/", timeout=60).read().decode()
m = re.search(r'href="([^"#]*/' + re.escape(name) + r')#sha256=([0-9a-f]{64})"', index)
if not m:
    sys.exit(f"spead2 {version} has no source distribution on PyPI; set SPEAD2_VERSION")
data = urllib.request.urlopen(m.group(1), timeout=300).read()
if hashlib.sha256(data).hexdigest() != m.group(2):
    sys.exit(f"{name}: sha256 mismatch with the PyPI index; retry the download")
open(f"{dest}/{name}", "wb").write(data)
PY
    tar -xzf "sdist/$src.tar.gz"
fi

# Two variants: the default one uses UDP GSO (send) and GRO (receive) where
# the kernel offers them; the second is built without, for comparison.
build_variant() {
    local dir="$1" bin="$2"
    shift 2
    if [[ ! -f "$src/$dir/build.ninja" ]]; then
        # -Dtools=enabled builds spead2_send/spead2_recv; the Python module
        # is not needed. ibverbs/pcap/cap are probed and used when present.
        meson setup "$src/$dir" "$src" \
            --buildtype=release -Db_ndebug=true \
            -Dtools=enabled -Dpython=false -Dunit_test=disabled \
            -Dcuda=disabled -Dgdrapi=disabled "$@"
    fi
    ninja -C "$src/$dir" -j "$jobs" src/spead2_send src/spead2_recv
    mkdir -p "$bin"
    for t in spead2_send spead2_recv; do
        ln -sf "$build_dir/$src/$dir/src/$t" "$bin/$t"
    done
}
build_variant build-tools bin
if [[ "${SPEAD2_NO_GSO_VARIANT:-1}" == 1 ]]; then
    build_variant build-tools-nogso bin-nogso -Dgso=disabled -Dgro=disabled
fi

"$build_dir/bin/spead2_recv" --help >/dev/null
"$build_dir/bin/spead2_send" --help >/dev/null
[[ -x "$build_dir/bin-nogso/spead2_recv" ]] && grep -q "define SPEAD2_USE_GRO 0" "$src/build-tools-nogso/include/spead2/common_features.h"
echo "spead2 $version tools in $build_dir/bin ($(($(date +%s) - started)) s)"
