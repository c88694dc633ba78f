"""The data-loader service: serves the pipeline's finished output to trainer ranks over ZeroMQ.

``python -m loader --data OUT`` serves; :class:`loader.client.LoaderClient` pulls.
See docs/loader.md.
"""
