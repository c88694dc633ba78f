"""A launcher: local processes, each start announced on the ventilator's standard error."""

import sys

from mlm_pipeline.plugin import LocalLauncher


class AnnouncingLauncher(LocalLauncher):
    name = "demo-announce"

    def start(self, role):
        print(f"demo-announce: starting the {role.name} (python -m {role.module})", file=sys.stderr, flush=True)
        super().start(role)
