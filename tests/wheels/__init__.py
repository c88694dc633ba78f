"""Per-platform wheels (scripts/wheels.sh, a step of .ci/run): the checks it runs on each wheel, and their quick tests."""
