"""The benchmark of issue "measure the pipeline": ``python -m bench.run``.

See docs/benchmarks.md for what it measures, how, and the latest results.
"""
