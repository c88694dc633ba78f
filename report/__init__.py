"""``mlm-report OUT``: a data report (HTML page and report.json) of a finished output (docs/report.md)."""
