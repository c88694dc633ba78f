#!/usr/bin/env bash
# Lint and type-check the whole tree (configured in pyproject.toml); .ci/run runs this before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
mypy
