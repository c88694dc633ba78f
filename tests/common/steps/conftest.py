import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import Task
from common.readers import Document, ParseReport
from common.steps import JobContext, Part, TaskRun, TaskStats
from common.storage import LocalStorage
from common.tokenization import Vocabulary, load_tokenizer
from tests.support.helpers import VOCAB, need_shared
from tests.support.run_configs import steps_of

TEXT = ["The first sentence is here. And a second one follows it.", "A new paragraph starts the next part."]


@pytest.fixture(scope="session")
def vocabulary():
    need_shared()
    return Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB)))


def documents(n: int) -> list[Document]:
    return [Document(i * 100, [f"Document {i} says hello. {line}" for line in TEXT], id=f"doc-{i}") for i in range(n)]


@pytest.fixture
def job(tmp_path, vocabulary):
    def make(**features) -> JobContext:  # common/steps: steps_of's keywords
        config = JobConfig(data_uri="", output_uri=str(tmp_path), reader=Component("wikiextractor"),
                           tokenizer_json="", objective=Component("bert", {"dupe_factor": 2}),
                           writer=Component("tfrecord"), steps=steps_of(**features))
        return JobContext(config, vocabulary, LocalStorage(str(tmp_path)))
    return make


def a_run(docs: list[Document], task: Task | None = None) -> TaskRun:
    task = task or Task("wiki_00", 0, 1000, 1000, "v")
    return TaskRun(task, b"", TaskStats(), ParseReport(), [Part("", task.key, task.shard_stem, list(docs))])
