#!/usr/bin/env bash
# Builds the Python module `frameloop` (python/) as an abi3 wheel into
# python/dist/, installs it into a virtual environment (python/.venv), builds
# the test ring writer and runs python/tests against it, the example notebook
# (examples/python/frameloop_host.ipynb, executed with nbclient) included.
# Needs python3 with venv and network access to PyPI (maturin, numpy, pytest,
# matplotlib, nbclient, ipykernel) and crates.io. Source scripts/env.sh first
# for NVRTC (the user-kernel compile tests skip without it).
# Everything it builds stays in git-ignored paths under python/.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=python/.venv
if [ ! -x "$VENV/bin/python" ]; then
  echo "python-test: creating $VENV" >&2
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --disable-pip-version-check --upgrade pip
"$PY" -m pip install -q --disable-pip-version-check maturin numpy pytest matplotlib nbclient nbformat ipykernel

echo "python-test: building the wheel (pip wheel ./python) into python/dist" >&2
rm -f python/dist/frameloop-*.whl
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps --wheel-dir python/dist ./python
"$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps python/dist/frameloop-*.whl
ls python/dist/frameloop-*.whl >&2

echo "python-test: building the test ring writer" >&2
cargo build --release --manifest-path python/Cargo.toml -p frameloop-ring-writer
export FRAMELOOP_RING_WRITER="$PWD/python/target/release/frameloop-ring-writer"

echo "python-test: pytest python/tests" >&2
export FRAMELOOP_REQUIRE_NOTEBOOK=1
cd python/tests
timeout "${PYTHON_TEST_SECONDS:-300}" "../.venv/bin/python" -m pytest -q -p no:cacheprovider .
