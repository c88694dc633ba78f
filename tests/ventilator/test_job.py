"""prepare_job's three steps (ventilator/job.py): validate refuses in one line before any work, identify
builds the job and its id, plan cuts the tasks."""

from __future__ import annotations

import shutil

import pytest

from tests.support.helpers import VOCAB, WIKI, need_shared
from tests.support.run_configs import run_config
from ventilator.job import JobError, identify, plan, prepare_job, validate
from ventilator.run_config import RunConfig


@pytest.fixture
def corpus(tmp_path):
    need_shared()
    root = tmp_path / "corpus"
    shutil.copytree(WIKI / "AA", root)
    return root


def _options(corpus, tmp_path, **kwargs) -> RunConfig:
    return run_config(**{"data": str(corpus), "output": str(tmp_path / "out"), "vocab_file": str(VOCAB), **kwargs})


@pytest.mark.parametrize("kwargs, message", [
    ({"params": {"no_such_option": 1}}, "--no-such-option does not apply to --objective bert"),
    # another variant's parameter, by the flag it declares (``ids_dtype`` is MDS's --mds-ids-dtype)
    ({"params": {"ids_dtype": "int32"}}, "^--mds-ids-dtype does not apply to --objective bert, --output-format "
                                         "tfrecord"),
    ({"objective": "nope"}, "nope"),
    ({"steps": {"holdout": {"fraction": 1.5}}}, "holdout"),
    ({"steps": {"dedup": {"mode": "minhash", "bands": 3}}}, "--minhash"),
    ({"vocab_file": "/nonexistent/vocab.txt"}, "tokenizer: "),
    ({"added_steps": ("nope",)}, "unknown step 'nope'"),
    ({"added_steps": ("holdout",)}, "--add-step holdout: the job places this step itself"),
    # A step's own flags, given while its other flags leave it off, would do nothing: said, naming them.
    # (A value from its variable: the command names it, tests/test_cli.py.)
    ({"steps": {"holdout": {"seed": 5}}}, r'^--holdout-seed does nothing here: the holdout '
                                          r'step is off \(its options: "Holdout" in --help\)$'),
    ({"steps": {"dedup": {"mode": "off", "partitions": 4}}},
     r"^--dedup-partitions does nothing here: the dedup step is off"),
    # The step's own declaration (common/job/params.py ``When``): MinHash's flags do something only with minhash.
    ({"steps": {"dedup": {"mode": "exact", "ngram": 3, "threshold": 0.7}}},
     "^--minhash-ngram, --minhash-threshold do nothing but with --dedup minhash: leave them out$"),
    ({"steps": {"dedup": {"mode": "off", "ngram": 3}}}, "^--minhash-ngram does nothing but with --dedup minhash"),
])
def test_validate_refuses_bad_input_in_one_line_and_writes_nothing(corpus, tmp_path, kwargs, message):
    options = _options(corpus, tmp_path, **kwargs)
    with pytest.raises(JobError, match=message) as refused:
        validate(options)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_validate_refuses_an_empty_input(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("")
    with pytest.raises(JobError, match=r"--data .*empty: no input files found \(1 skipped\)"):
        validate(run_config(data=str(tmp_path / "empty"), output=str(tmp_path / "out"), vocab_file=str(VOCAB)))


def test_identify_gives_the_id_of_the_same_command_and_another_for_another(corpus, tmp_path):
    options = _options(corpus, tmp_path)
    checked = validate(options)
    config = identify(options, checked)
    assert config.job_id == identify(options, validate(options)).job_id == prepare_job(options).config.job_id
    other = _options(corpus, tmp_path, params={"dupe_factor": 2})
    assert identify(other, validate(other)).job_id != config.job_id
    assert not (tmp_path / "out" / "manifest.jsonl").exists()  # identifying writes nothing


def test_identify_refuses_an_output_holding_another_job(corpus, tmp_path):
    options = _options(corpus, tmp_path)
    config = identify(options, validate(options))
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.jsonl").write_text('{"job_id": "0123456789abcdef", "task": "t", "shard": "s"}\n')
    with pytest.raises(JobError, match="belongs to another job") as refused:
        identify(options, validate(options))
    assert f"this one is {config.job_id}" in str(refused.value) and "\n" not in str(refused.value)


def test_an_output_begun_when_auto_split_sentences_for_chunks_is_resumed_as_it_was_begun(corpus, tmp_path):
    """--objective tokens --max-seq-length N: --segmenter auto is the document now, another job (its id names its
    segmenter); an output begun when auto meant Bling Fire's sentences (the same job as --segmenter blingfire)
    is resumed with them, not refused.  An output of another job is still refused."""
    def chunked(**kwargs) -> RunConfig:
        return _options(corpus, tmp_path, objective="tokens", output_format="parquet",
                        params={"max_seq_length": 128}, **kwargs)

    fresh = identify(chunked(), validate(chunked()))
    assert fresh.step("segment").params["segmenter"] == "document"
    begun = identify(chunked(segmenter="blingfire"), validate(chunked(segmenter="blingfire")))
    assert begun.job_id != fresh.job_id
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.jsonl").write_text(f'{{"job": "{begun.job_id}", "task": "t"}}\n')
    resumed = identify(chunked(), validate(chunked()))
    assert resumed.job_id == begun.job_id and resumed.step("segment").params["segmenter"] == "blingfire"
    (out / "manifest.jsonl").write_text('{"job": "0123456789abcdef", "task": "t"}\n')
    with pytest.raises(JobError, match=f"belongs to another job .*this one is {fresh.job_id}"):
        identify(chunked(), validate(chunked()))


def test_a_refused_resume_names_the_options_that_changed(corpus, tmp_path):
    """The output's dataset_info.json says how it was made: the refusal names each option whose value differs
    (with both values), and says when none does (the corpus itself changed)."""
    from common.describe import dataset_info
    from common.storage import LocalStorage

    first = _options(corpus, tmp_path, params={"dupe_factor": 3})
    config = identify(first, validate(first))
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.jsonl").write_text(f'{{"job": "{config.job_id}", "task": "t"}}\n')
    dataset_info.write(LocalStorage(str(out)), config, {}, complete=False)
    other = _options(corpus, tmp_path, params={"dupe_factor": 2, "masked_lm_prob": 0.2}, task_size=1 << 18)
    with pytest.raises(JobError, match="belongs to another job") as refused:
        identify(other, validate(other))
    message = str(refused.value)
    assert "--dupe-factor 3 → 2" in message and "--masked-lm-prob 0.15 → 0.2" in message
    assert f"--task-size {config.task_size} → {1 << 18}" in message and "\n" not in message
    # jieba's words are used by whole-word masking only (a --word-segmenter that does nothing is refused)
    segmented = _options(corpus, tmp_path, params={"dupe_factor": 3, "do_whole_word_mask": True},
                         word_segmenter="jieba")
    with pytest.raises(JobError, match="--word-segmenter none → jieba"):
        identify(segmented, validate(segmented))
    (corpus / "wiki_00").write_bytes((corpus / "wiki_00").read_bytes() + b"\n")
    with pytest.raises(JobError) as changed:
        identify(first, validate(first))
    assert "no option changed: the corpus changed since" in str(changed.value)


def test_a_refused_resume_names_each_changed_value_as_it_is_typed(corpus, tmp_path):
    """A switch as its flag or its --no- form (it said ``--gzip False → True``), an int and a choice as the flag
    and the value: what a user types to get either side."""
    from common.describe import dataset_info
    from common.storage import LocalStorage

    def given(gzip: bool, length: int, pack: str) -> RunConfig:
        return _options(corpus, tmp_path, objective="roberta", output_format="tfrecord",
                        params={"gzip": gzip, "max_seq_length": length, "pack": pack})

    first = given(False, 128, "full-sentences")
    config = identify(first, validate(first))
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.jsonl").write_text(f'{{"job": "{config.job_id}", "task": "t"}}\n')
    dataset_info.write(LocalStorage(str(out)), config, {}, complete=False)
    other = given(True, 256, "doc-sentences")
    with pytest.raises(JobError, match="belongs to another job") as refused:
        identify(other, validate(other))
    message = str(refused.value)
    for change in ("--no-gzip → --gzip", "--max-seq-length 128 → 256", "--pack full-sentences → doc-sentences"):
        assert change in message, message
    assert "False" not in message and "True" not in message and "\n" not in message


def test_plan_cuts_every_byte_into_tasks_and_puts_dedup_stages_first(corpus, tmp_path):
    options = _options(corpus, tmp_path, task_size=64 * 1024, steps={"dedup": {"mode": "exact", "partitions": 2}})
    checked = validate(options)
    config = identify(options, checked)
    job = plan(options, checked, config)
    normal = [task for task in job.tasks if not task.stage]
    assert sum(task.length for task in normal) == sum(f.size for f in checked.files)
    assert len(normal) > 1
    stages = [task.stage for task in job.tasks]
    assert stages[:len(normal)] == ["signature"] * len(normal) and stages[-len(normal):] == [""] * len(normal)
    assert (tmp_path / "out").exists()  # the dedup plan: written by plan, the first step that does work


def test_a_steps_flags_at_their_defaults_or_with_the_step_on_are_accepted(corpus, tmp_path):
    validate(_options(corpus, tmp_path, steps={"holdout": {"fraction": 0.0, "seed": 0}, "dedup": {"mode": "off"}}))
    validate(_options(corpus, tmp_path, steps={"holdout": {"fraction": 0.1, "seed": 5},
                                               "dedup": {"mode": "minhash", "ngram": 3}}))


@pytest.mark.parametrize("endpoint, message", [
    ("http://AKIAEXAMPLE:wJalrXUtnFEMI@127.0.0.1:7480", "holds a user name or password"),
    ("https://AKIAEXAMPLE@s3.example.com", "holds a user name or password"),
    ("s3.example.com:7480", "must be an http:// or https:// URL"),
    ("ftp://s3.example.com", "must be an http:// or https:// URL"),
    ("http://127.0.0.1:99999", "is not a URL"),
])
def test_an_s3_endpoint_with_credentials_or_no_host_is_refused_without_echoing_it(corpus, tmp_path, endpoint,
                                                                                  message):
    """The endpoint travels in the job to every worker, lands in dataset_info.json and is quoted by botocore's
    errors: credentials in it were spread everywhere.  Refused before any work, whether or not a path is s3://,
    and the refusal never quotes the URL (its secret)."""
    options = _options(corpus, tmp_path, s3_endpoint_url=endpoint)
    with pytest.raises(JobError, match=message) as refused:
        validate(options)
    assert "\n" not in str(refused.value) and "wJalrXUtnFEMI" not in str(refused.value)
    assert "AKIAEXAMPLE" not in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_the_s3_store_refuses_an_endpoint_with_credentials_itself():
    """Every reader of s3:// (the worker given a hostile job, the loader, mlm-report) opens the store: it refuses
    them too, in one line naming none of them."""
    from common.storage import StorageError
    from common.storage.s3 import S3Storage, endpoint_problem

    assert endpoint_problem("") is None and endpoint_problem("http://127.0.0.1:7480") is None
    assert endpoint_problem("https://s3.eu-west-1.amazonaws.com") is None
    with pytest.raises(StorageError, match="holds a user name or password") as refused:
        S3Storage("s3://bucket/prefix", "http://KEY:hunter2@127.0.0.1:7480")
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize("endpoint, message", [
    # An AWS secret key holds "/" (and "+"): urlsplit ends the host at the "/", reads "SECRET..." as the port, and
    # its error quoted it; with digits before the "/" the URL parsed, and the secret was accepted and spread.
    ("http://AKIAEXAMPLE:wJalrXUtnFEMI/K7MDENG@127.0.0.1:7480", "holds a user name or password"),
    ("http://AKIAEXAMPLE:1234/K7MDENG@127.0.0.1:7480", "holds a user name or password"),
    ("http://AKIAEXAMPLE:wJalrXUtnFEMI?K7MDENG@127.0.0.1:7480", "holds a user name or password"),
    ("http://AKIAEXAMPLE:wJalrXUtnFEMI#K7MDENG@127.0.0.1:7480", "holds a user name or password"),
    # No "@", but a port or a host urlsplit cannot read: the refusal says so without quoting them.
    ("http://127.0.0.1:wJalrXUtnFEMI", "is not a URL"),
    ("http://AKIAEXAMPLE:wJalrXUtnFEMI\uff20127.0.0.1:7480", "is not a URL"),
])
def test_an_s3_endpoint_whose_secret_holds_a_slash_is_refused_without_quoting_any_of_it(endpoint, message):
    """urllib's own errors quote the text they could not read (a port, a host): the refusal is the store's own
    words, and a user:secret@ is found whatever the secret holds."""
    from common.storage import StorageError
    from common.storage.s3 import S3Storage, endpoint_problem

    problem = endpoint_problem(endpoint)
    assert problem is not None and message in problem
    assert "wJalrXUtnFEMI" not in problem and "AKIAEXAMPLE" not in problem.upper() and "K7MDENG" not in problem
    with pytest.raises(StorageError) as refused:
        S3Storage("s3://bucket/prefix", endpoint)
    assert "wJalrXUtnFEMI" not in str(refused.value) and "K7MDENG" not in str(refused.value)


def test_an_ipv6_s3_endpoint_is_still_taken():
    from common.storage.s3 import endpoint_problem

    for endpoint in ("http://[::1]:7480", "https://[::1]", "http://[fe80::1%25eth0]:7480/"):
        assert endpoint_problem(endpoint) is None, endpoint
    assert "is not a URL" in (endpoint_problem("http://[::1:7480") or "")


@pytest.mark.parametrize("endpoint", [5, 1.5, True, ["http://127.0.0.1:7480"], {"url": "x"}])
def test_an_s3_endpoint_of_another_type_is_the_stores_one_line_refusal(endpoint):
    """An output's dataset_info.json records the job's endpoint, and mlm-report opens the input at it: a hostile
    or damaged one is any JSON value.  Not a string, the store refused it with a TypeError (mlm-report's
    traceback: it catches the store's StorageError); now its one line."""
    from common.storage import StorageError
    from common.storage.s3 import S3Storage, endpoint_problem

    assert "is not a URL" in (endpoint_problem(endpoint) or "")
    with pytest.raises(StorageError, match="is not a URL"):
        S3Storage("s3://bucket/prefix", endpoint)
