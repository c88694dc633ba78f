"""A storage backend from a plugin: ``demo://PATH`` is a local directory that workers read by byte range
themselves, as they read an object store (found by its URI scheme, entry-point group mlm_pipeline.storage)."""

from mlm_pipeline.plugin import LocalStorage


class DemoStorage(LocalStorage):
    name = "demo"
    remote = True  # the job sends workers byte ranges and its URI, not content

    @classmethod
    def open(cls, uri: str, endpoint_url: str | None = None) -> "DemoStorage":
        return cls(uri.removeprefix("demo://"))

    def uri(self, name: str) -> str:
        return "demo://" + super().uri(name)
