import pytest

from tests import s3_server


@pytest.fixture(scope="session")
def s3():
    """One local radosgw for the whole session (about 2 s to start)."""
    reason = s3_server.available()
    if reason:
        pytest.skip(reason)
    with s3_server.S3Server() as server:
        yield server


from tests.loader_helpers import loader_dataset  # noqa: E402,F401  (the loader tests' output, built once per session)
