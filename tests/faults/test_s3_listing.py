"""Listing an S3 prefix a page at a time (web-scale inputs hold 100k+ objects): every object once, in
order, each page requested and retried on its own, against a real radosgw behind a failing proxy."""

from __future__ import annotations

import pytest

from common.storage import RetryPolicy, S3Storage
from tests.support.faulty_proxy import FaultyProxy

pytestmark = [pytest.mark.s3, pytest.mark.faults]


def test_a_failing_page_is_retried_alone_and_the_listing_is_whole(s3, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    client, bucket = s3.client(), s3.new_bucket("listing")
    names = [f"corpus/{i % 7}/part-{i:04d}.txt" for i in range(50)] + ["corpus/ü-last.txt", "corpus/_SUCCESS"]
    for number, name in enumerate(names):
        client.put_object(Bucket=bucket, Key=name, Body=b"x" * (number + 1))

    # Requests 5 and 6 are the third page's request and botocore's own retry of it: only the project's
    # retry (RetryPolicy) gets that page, and then it must not start the listing over.
    with FaultyProxy(s3.endpoint_url, fail_every=0, fail_requests=frozenset({5, 6})) as proxy:
        storage = S3Storage(f"s3://{bucket}/corpus", proxy.url, RetryPolicy(attempts=3, first_delay=0.05))
        storage.list_page_size = 7
        listed = storage.list_inputs()
        pages = -(-len(names) // 7)
        assert proxy.failed == 2 and proxy.requests == pages + 2, "a page retried alone, not the listing"

        expected = sorted(n.removeprefix("corpus/") for n in names if not n.endswith("_SUCCESS"))
        assert [f.path for f in listed] == expected
        sizes = {name.removeprefix("corpus/"): number + 1 for number, name in enumerate(names)}
        assert all(f.size == sizes[f.path] and f.version for f in listed)
        assert storage.output_sizes() == sizes
        assert storage.list_outputs() == sorted(sizes)
