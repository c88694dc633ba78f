"""The ventilator's backlog in CloudWatch (moto in server mode on loopback),
published while a real job runs: the values follow the job from every task
waiting to none, with the workers it knows, and the last one says the job is
no longer active (what scales the group to its minimum)."""

import json
import shutil
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from tests.support.helpers import VOCAB, WIKI, manifest, need_shared, run_ventilator
from tests.support.moto_lifecycle import aws_env
from ventilator.publishers.cloudwatch import Backlog, metric_data

pytestmark = pytest.mark.e2e

NAMESPACE = "mlm-pipeline/test"


def test_metric_data_shape():
    data = {d["MetricName"]: d["Value"] for d in metric_data(Backlog(5, 3, 4, 2))}
    assert data == {"Backlog": 8, "PendingTasks": 5, "LeasedTasks": 3, "Workers": 4, "WorkerHosts": 2,
                    "JobActive": 1}
    assert {d["MetricName"]: d["Value"] for d in metric_data(Backlog(0, 0, 0, 0, active=False))}["JobActive"] == 0


def _series(cloudwatch, name: str, start: datetime, end: datetime) -> list[tuple[datetime, float, float]]:
    """(second, minimum, maximum) of a metric, in time order."""
    points = cloudwatch.get_metric_statistics(Namespace=NAMESPACE, MetricName=name, StartTime=start, EndTime=end,
                                              Period=1, Statistics=["Minimum", "Maximum"])["Datapoints"]
    return sorted((p["Timestamp"], p["Minimum"], p["Maximum"]) for p in points)


def test_backlog_follows_a_real_job(tmp_path, moto):
    need_shared()
    endpoint = moto.endpoint
    # Three copies of the sample: ~24 tasks of ~0.5 s each (256K at dupe 40) for two worker processes, so
    # the job spans several seconds (CloudWatch's finest period) even on a fast machine.
    corpus = tmp_path / "corpus"
    for copy in range(3):
        shutil.copytree(WIKI, corpus / f"copy{copy}")
    start = datetime.now(UTC) - timedelta(seconds=5)
    output = tmp_path / "out"
    result = run_ventilator(corpus, output, "--vocab-file", VOCAB, "--dupe-factor", "40", "--task-size", "256K",
                            "--workers", "2", "--cloudwatch-namespace", NAMESPACE, "--cloudwatch-seconds", "0.2",
                            "--instance-hourly-price", "0.25", env=aws_env(endpoint))
    assert result.returncode == 0, result.stderr[-3000:]
    end = datetime.now(UTC) + timedelta(seconds=5)
    _check_cost(output, wall_seconds=(end - start).total_seconds(), price=0.25)
    tasks = len(manifest(output))
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1", endpoint_url=endpoint,
                              aws_access_key_id="testing", aws_secret_access_key="testing")
    names = {m["MetricName"] for m in cloudwatch.list_metrics(Namespace=NAMESPACE)["Metrics"]}
    assert names == {"Backlog", "PendingTasks", "LeasedTasks", "Workers", "WorkerHosts", "JobActive"}

    backlog = _series(cloudwatch, "Backlog", start, end)
    assert len(backlog) >= 2, backlog  # the job spans at least two of CloudWatch's seconds
    assert backlog[0][2] == tasks, "at the start every task waits"
    maxima = [maximum for _, _, maximum in backlog]
    assert maxima == sorted(maxima, reverse=True), f"a clean run's backlog only shrinks: {maxima}"
    assert backlog[-1][1] == 0, "at the end nothing is left"
    # CloudWatch aggregates per second: a fast machine may finish several tasks within one, so the
    # values in between are looked for among each second's minimum and maximum.
    between = [value for _, minimum, maximum in backlog for value in (minimum, maximum) if 0 < value < tasks]
    assert between, f"no value between start and end: {backlog}"

    workers = _series(cloudwatch, "Workers", start, end)
    assert max(maximum for _, _, maximum in workers) == 2
    assert max(maximum for _, _, maximum in _series(cloudwatch, "WorkerHosts", start, end)) == 1
    leased = _series(cloudwatch, "LeasedTasks", start, end)
    assert 1 <= max(maximum for _, _, maximum in leased) <= 2, "at most one task per worker process"

    active = _series(cloudwatch, "JobActive", start, end)
    assert active[0][2] == 1 and active[-1][1] == 0, active
    assert "JobActive=0" in result.stderr


def _check_cost(output, wall_seconds: float, price: float) -> None:
    """The summary's bill: one host, its hours within the run, CPU-hours of two processes at most."""
    cost = json.loads((output / "summary.json").read_text())["cost"]
    records = sum(entry["records"] for entry in manifest(output).values())
    assert cost["worker_hosts"] == 1
    assert 0 < cost["instance_hours"] * 3600 < wall_seconds
    assert 0 < cost["worker_cpu_hours"] * 3600 < 2 * wall_seconds
    assert cost["output_tokens"] == records * 128
    assert cost["cost"] == pytest.approx(cost["instance_hours"] * price, rel=1e-3)
    assert cost["cost_per_billion_output_tokens"] == pytest.approx(cost["cost"] / (records * 128 / 1e9), rel=1e-3)
    assert cost["cost_per_input_gb"] == pytest.approx(cost["cost"] / cost["input_gb"], rel=1e-3)


def test_unreachable_cloudwatch_does_not_stop_the_job(tmp_path):
    """A CloudWatch endpoint that refuses: logged once, the job finishes the same."""
    need_shared()
    result = run_ventilator(WIKI, tmp_path / "out", "--vocab-file", VOCAB, "--task-size", "1M", "--workers", "1",
                            "--cloudwatch-namespace", NAMESPACE, "--cloudwatch-seconds", "0.2",
                            env={**aws_env("http://127.0.0.1:9"), "AWS_MAX_ATTEMPTS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("cloudwatch: cannot publish the backlog") == 1, result.stderr[-3000:]
