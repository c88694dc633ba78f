"""Everything checked before a run starts: input, tokenizer, objective, output.

Problems that would otherwise surface as failed tasks hours into a run (no
input, a tokenizer without a mask token, a flag the objective does not
take, an output format that cannot hold the objective's records, an output
holding another job) are reported here, in one line, before any socket is
opened.

prepare_job is three steps: validate (every refusal that needs no job id:
options, tokenizer, the inputs listed, the components' parameters),
identify (the JobConfig, built in job_config() only, and its id, checked
against the output's manifest) and plan (the tasks, the steps' stages
before and after the normal pass).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from common.job.config import JobConfig, check_places, standard_steps
from common.job.params import Component, ParamValue, own_flag
from common.job.tasks import InputFile, compression_of
from common.objectives import objective_named
from common.output.lock import OutputLock, OutputLocked
from common.output.manifest import check_job, read_first_entry
from common.readers import Reader, claimed_by_name, detect, reader_named
from common.readers.content import decompress
from common.segmenters import resolve as resolve_segmenter
from common.segmenters import segmenter_named
from common.steps import plan_stages, step_named
from common.steps.words import Words
from common.storage import LocalStorage, Storage, StorageError, is_remote, open_storage
from common.storage.s3 import endpoint_problem
from common.tokenization import TokenizerError, Vocabulary, han_words, load_vocabulary
from common.version import version
from common.word_segmenters import NONE as NO_WORD_SEGMENTER
from common.word_segmenters import word_segmenter_named
from common.writers import writer_named
from ventilator.bulk import built_for_the_job
from ventilator.run_config import RunConfig, described_flags, variant_flag
from ventilator.server import Job

log = logging.getLogger("ventilator")


class JobError(Exception):
    """A one-line reason the job cannot start."""


def _detect_format(storage, files: list[InputFile]) -> type[Reader]:
    """A name that says its format (.parquet, .jsonl) among the first files
    wins; else the first non-empty file's content decides."""
    names = [f.path or getattr(storage, "root", "") for f in files[:5]]  # --data naming one local file: its name
    for name in names:
        claimed = claimed_by_name(name)
        if claimed is not None:  # no need to read (or decompress) anything
            return claimed
    for f, name in zip(files[:5], names):
        try:
            if compression_of(f.path):
                head = decompress(storage.read_all(f.path, f.version), compression_of(f.path))[:65536]
            else:
                with storage.open_reader(f.path, f.version) as reader:
                    head = reader.read_at(0, 65536)
        except (OSError, StorageError, ValueError):
            continue
        if head.strip():
            try:
                return detect(head, name)
            except ValueError as error:
                raise JobError(f"--format auto: {name}: {error}") from None
    return reader_named("text")


def _readable(storage, files: list[InputFile]) -> tuple[list[InputFile], dict[str, str]]:
    """Local files that cannot be opened are reported and left out."""
    if not isinstance(storage, LocalStorage):
        return files, {}
    usable, skipped = [], {}
    for f in files:
        if f.size == 0:
            skipped[f.path] = "empty file"
            continue
        try:
            with storage.open_reader(f.path, f.version) as reader:
                reader.read_at(0, 1)
        except (OSError, StorageError) as error:
            skipped[f.path] = f"unreadable: {error}"
            continue
        usable.append(f)
    return usable, skipped


def split_params(given: dict[str, ParamValue], *components) -> list[dict[str, ParamValue]]:
    """Each component's share of the given parameters; a parameter that none
    of them takes is refused, naming the components that run."""
    import dataclasses

    shares: list[dict[str, ParamValue]] = [{} for _ in components]
    for name, value in given.items():
        takers = [i for i, c in enumerate(components) if name in {f.name for f in dataclasses.fields(c.Params)}]
        if not takers:
            reader, objective, writer = components[:3]
            raise JobError(f"{variant_flag(name)} does not apply to --objective {objective.name}, "
                           f"--output-format {writer.name} or --format {reader.name}")
        for i in takers:
            shares[i][name] = value
    return shares


@dataclass(frozen=True)
class Checked:
    """What validate() found good, for identify() and plan(), so nothing is loaded or listed twice: the
    tokenizer, the inputs, the reader (it plans the tasks) and the job's components as it records them."""

    vocabulary: Vocabulary
    storage: Storage  # the input's
    listed: list[InputFile]  # every input listed, readable or not (the job's identity digests them all)
    files: list[InputFile]  # those that can be read
    skipped: dict[str, str]  # path -> reason
    reader: Reader
    #: The job's components as it records them (name and checked parameters).
    reader_component: Component
    objective: Component
    writer: Component
    #: Each step's parameters given, by step name (its own flags, the segmenter, the word segmenter), and the
    #: steps added with --add-step: what common.job.config.standard_steps makes the job's steps from.
    steps: dict[str, dict[str, ParamValue]]
    added_steps: tuple[Component, ...] = ()
    #: The segment step as ``--segmenter auto`` made it before the objective's parameters chose its unit
    #: (``Objective.unit``), when that was another: an output begun then is resumed with it (identify()).
    earlier_segment: dict[str, ParamValue] | None = None


def prepare_job(run: RunConfig) -> Job:
    """Validate, identify, plan: a job ready to serve, or JobError (one line) before any work."""
    checked = validate(run)
    config = identify(run, checked)
    return plan(run, checked, config)


def _refuse_idle_flags(step_class, params) -> None:
    """ValueError naming the step's own flags given away from their defaults while the step is off: they would
    do nothing (``--holdout-seed 5`` without ``--holdout-fraction``), and the user meant something by them."""
    def same(a, b) -> bool:
        return a == b or (a != a and b != b)  # NaN, a plugin's "unset", is its own default

    defaults = step_class.make_params({})
    # A value from the environment: the command names its variable (common.job.cli_settings.naming_variables).
    idle = [flag for f in dataclasses.fields(step_class.Params)
            if (flag := own_flag(f)) and not same(getattr(params, f.name), getattr(defaults, f.name))]
    if idle:
        section = getattr(step_class.Params, "section", "") or f"Step {step_class.name}"
        raise ValueError(f"{', '.join(idle)} {'does' if len(idle) == 1 else 'do'} nothing here: the "
                         f"{step_class.name} step is off (its options: \"{section}\" in --help)")


def validate(run: RunConfig) -> Checked:
    """Every refusal that needs no job id, in one line (JobError): the options, the tokenizer, the inputs
    (listed; only their first bytes read, to detect the format) and the components' parameters."""
    endpoint = endpoint_problem(run.input.s3_endpoint_url)  # whether or not a path is s3://: it goes in the job
    if endpoint:
        raise JobError(endpoint)
    try:
        for name, given in run.job.steps.items():  # the steps' own flags, each step checking its own
            step_class = step_named(name)
            if not step_class.has_switch():
                raise ValueError(f"step {name} is added with --add-step, not by flags of its own")
            params = step_class.make_params(dict(given))
            if not step_class.enabled(params):
                _refuse_idle_flags(step_class, params)
    except ValueError as error:
        raise JobError(str(error)) from None
    try:
        objective_class = objective_named(run.job.objective)
        writer_class = writer_named(run.job.output_format)
        word_segmenter_class = word_segmenter_named(run.job.word_segmenter)
        added_classes = [step_named(name) for name in run.job.add_step]
        check_places(run.job.add_step)  # a step after one that does not exist (a plugin's typo)
    except ValueError as error:
        raise JobError(str(error)) from None
    for step_class in added_classes:
        if step_class.has_switch():
            raise JobError(f"--add-step {step_class.name}: the job places this step itself (see its own options)")

    try:
        vocabulary = load_vocabulary(run.tokenizer.vocab_file, run.tokenizer.tokenizer, run.tokenizer.do_lower_case,
                                     run.tokenizer.special_tokens(), reference=objective_class.reference_casing)
    except TokenizerError as error:
        raise JobError(f"tokenizer: {error}") from None
    log.info("tokenizer: %s", vocabulary.describe())
    if warning := vocabulary.casing_warning():
        log.warning("tokenizer: %s", warning)

    storage, listed, files, skipped = list_inputs(run)

    if run.input.corpus_format == "auto":
        reader_class = _detect_format(storage, files)
        log.info("input format: %s (detected; --format to override)", reader_class.name)
    else:
        try:
            reader_class = reader_named(run.input.corpus_format)
        except ValueError as error:
            raise JobError(str(error)) from None

    try:
        segmenter_class = segmenter_named(resolve_segmenter(
            run.job.segmenter, _objective_unit(objective_class, run.job.params) or reader_class.default_segmenter))
        earlier_class = segmenter_named(resolve_segmenter(
            run.job.segmenter, objective_class.segment_unit or reader_class.default_segmenter))
        earlier_segment = None
        if earlier_class is not segmenter_class:
            earlier = earlier_class.component(earlier_class.make_params({}))
            earlier_segment = {"segmenter": earlier.name, **earlier.params}
    except ValueError as error:
        raise JobError(str(error)) from None
    unavailable = segmenter_class.unavailable()  # a native library that does not load here: before any work
    if unavailable:
        raise JobError(unavailable)
    extra = (word_segmenter_class,) if word_segmenter_class is not None else ()
    reader_given, objective_given, writer_given, own_given, *more_given = split_params(
        run.job.params, reader_class, objective_class, writer_class, segmenter_class, *extra, *added_classes)
    segmenter_given, steps_given = more_given[:len(extra)], more_given[len(extra):]
    try:
        segmenter = segmenter_class.component(segmenter_class.make_params(own_given))
    except ValueError as error:
        raise JobError(f"--segmenter {segmenter_class.name}: {error}") from None
    try:
        added_steps = tuple(step_class.component(step_class.make_params(given))
                            for step_class, given in zip(added_classes, steps_given))
    except ValueError as error:
        raise JobError(f"--add-step: {error}") from None
    word_segmenter = Component(NO_WORD_SEGMENTER)
    if word_segmenter_class is not None:
        try:
            han_words.check_tokenizer(vocabulary)
            word_segmenter = word_segmenter_class.component(word_segmenter_class.make_params(segmenter_given[0]))
        except ValueError as error:
            raise JobError(f"--word-segmenter {word_segmenter_class.name}: {error}") from None
        log.info("word segmenter: %s, inside runs of Han characters", word_segmenter.name)
    try:
        reader_params = reader_class.make_params(reader_given)
        objective_params = objective_class.make_params(objective_given)
        writer_params = writer_class.make_params(writer_given)
        objective_class.check_vocabulary(vocabulary.special)
        objective = objective_class(objective_params, vocabulary.special)
        if word_segmenter_class is not None and not objective.uses_word_starts:
            raise ValueError(f"--word-segmenter {word_segmenter_class.name} does nothing here: its words are used "
                             "only by whole-word masking (--do-whole-word-mask) or written as word_starts "
                             "(--objective roberta --masking none, electra --word-starts); leave it out")
        writer_class.check_features(writer_params, objective.features)
        reader = reader_class(reader_params)
        reader.check_inputs(storage, files)
    except ValueError as error:
        raise JobError(f"--objective {objective_class.name}, --output-format {writer_class.name}, --format "
                       f"{reader_class.name}: {error}") from None
    steps = {**run.job.steps, "segment": {"segmenter": segmenter.name, **segmenter.params},
             "words": Words.component_of(word_segmenter).params}
    return Checked(vocabulary, storage, listed, files, skipped, reader, reader_class.component(reader_params),
                   objective_class.component(objective_params), writer_class.component(writer_params), steps,
                   added_steps, earlier_segment)


def _objective_unit(objective_class, given: dict[str, ParamValue]) -> str | None:
    """What ``--segmenter auto`` means for the objective with its share of the parameters given
    (``Objective.unit``); its class's own when they are not good parameters (the refusal comes in validate(),
    in one line with the other components')."""
    names = {f.name for f in dataclasses.fields(objective_class.Params)}
    try:
        return objective_class.unit(objective_class.make_params({k: v for k, v in given.items() if k in names}))
    except ValueError:
        return objective_class.segment_unit


def list_inputs(run: RunConfig) -> tuple[Storage, list[InputFile], list[InputFile], dict[str, str]]:
    """The input's storage, every file listed, those that can be read, and why the others cannot
    (JobError if none can)."""
    try:
        storage = open_storage(run.input.data, run.input.s3_endpoint_url)
        listed = storage.list_inputs()
    except StorageError as error:
        raise JobError(str(error)) from None
    files, skipped = _readable(storage, listed)
    skipped.update(storage.unlisted)
    for path, reason in skipped.items():
        log.warning("skipping input %s: %s", path or run.input.data, reason)
    if not files:
        raise JobError(f"--data {run.input.data}: no input files found"
                       + (f" ({len(skipped)} skipped)" if skipped else ""))
    return storage, listed, files, skipped


def identify(run: RunConfig, checked: Checked) -> JobConfig:
    """The job (its id with it); JobError if the output already holds another job's manifest."""
    try:
        config = job_config(run, checked)
    except ValueError as error:  # an added step whose place is not in this job
        raise JobError(str(error)) from None
    try:
        output = open_storage(config.output_uri, run.input.s3_endpoint_url)
        first = read_first_entry(output)  # the sink checks every line; one tells whose output this is
        if first and first.get("job") != config.job_id and checked.earlier_segment is not None:
            config = _begun_earlier(run, checked, config, first.get("job"))
        check_job([first] if first else [], config.job_id, output.uri("manifest.jsonl"),
                  lambda: _what_changed(output, config, first.get("job") if first else None))
    except Exception as error:  # ManifestMismatch, or an unreachable store
        raise JobError(str(error)) from None
    return config


def _begun_earlier(run: RunConfig, checked: Checked, config: JobConfig, old_id) -> JobConfig:
    """The job as ``--segmenter auto`` made it before the objective's parameters chose its unit, when the output
    holds that job (``old_id``): resumed as it was begun, not refused as another job; else ``config``."""
    assert checked.earlier_segment is not None
    earlier = job_config(run, dataclasses.replace(checked, steps={**checked.steps, "segment": checked.earlier_segment}))
    if earlier.job_id != old_id:
        return config
    log.info("--segmenter auto: the output's job was begun with --segmenter %s (what auto meant for it then); "
             "resumed with it", checked.earlier_segment["segmenter"])
    return earlier


def _older_behaviour(config: JobConfig, old_id) -> str:
    """Which of this release's behaviour versions (docs/design.md, "Versions") the output's job ``old_id`` was
    made without, as "the parquet writer's version 2", when the same command at the previous version gives that
    id; "" if none does."""
    versions = config.versions()
    for key, newer in versions.items():
        older = {k: v for k, v in versions.items() if k != key}
        if newer > 2:
            older[key] = newer - 1
        if config.identity_hash(versions=older) == old_id:
            axis, name = key.split(":", 1)
            return f"{name} {axis}'s version {newer}"
    return ""


def _what_changed(output, config: JobConfig, old_id=None) -> str:
    """For the refusal: the options whose values differ from those the output's dataset_info.json records, or
    that none does (the corpus changed, or an older release made it: its writer or a step wrote other bytes);
    "" when the output has no readable description."""
    from common.describe import dataset_info

    older = _older_behaviour(config, old_id) if old_id else ""
    if older:
        return (f"no option changed: an older release made it, and this one writes other bytes for the same job "
                f"(the {older})")

    try:
        old = dataset_info.read(output)
        if old is None:
            return ""
        changes = dataset_info.changed_options(old, dataset_info.describe(config, {}, complete=False),
                                               described_flags())
    except Exception:  # an unreadable description: the refusal stands without the detail
        return ""
    if not changes and "steps" not in old:  # described before the steps were: a step's option may differ
        return ""
    if not changes:
        return "no option changed: the corpus changed since (a file's size, time or ETag, or the list of files)"
    return "changed: " + ", ".join(changes)


def lock_output(run: RunConfig, config: JobConfig) -> OutputLock:
    """The output's lock, held and renewing (common/output/lock.py); JobError naming the holder if another run
    has it."""
    output = open_storage(config.output_uri, run.input.s3_endpoint_url)
    lock = OutputLock(output, config.job_id)
    try:
        lock.acquire()
    except OutputLocked as error:
        raise JobError(str(error)) from None
    except Exception as error:  # an unreachable store, or one that cannot create conditionally
        raise JobError(f"--output {run.job.output}: cannot take the output's lock: {error}") from None
    lock.start_renewing()
    return lock


def job_config(run: RunConfig, checked: Checked) -> JobConfig:
    """The one place a JobConfig is built from the options and what validate() resolved."""
    data_is_remote = is_remote(run.input.data)  # an object store: workers read their byte ranges themselves
    read_mode = "range" if (data_is_remote or run.input.shared_fs) else "ship"
    data_uri = run.input.data if data_is_remote else checked.storage.root
    output_uri = run.job.output if is_remote(run.job.output) else open_storage(run.job.output).root
    steps = standard_steps(checked.steps, added=checked.added_steps, input_bytes=sum(f.size for f in checked.files))
    return JobConfig(
        data_uri=data_uri,
        output_uri=output_uri,
        reader=checked.reader_component,
        tokenizer_json=checked.vocabulary.to_json(),
        objective=checked.objective,
        writer=checked.writer,
        read_mode=read_mode,
        s3_endpoint_url=run.input.s3_endpoint_url,
        sink_address=run.sink.sink_address or f":{run.sink.sink_port}",
        lease_seconds=run.delivery.lease_seconds,
        heartbeat_seconds=run.delivery.heartbeat_seconds,
        task_size=run.input.task_size,
        inputs_digest=JobConfig.digest_inputs(checked.listed),  # readable or not: a passing read error is no new corpus
        command=run.command,
        version=version(),
        steps=steps,
    )


def plan(run: RunConfig, checked: Checked, config: JobConfig) -> Job:
    """The job's tasks: the steps' stages before the normal pass (dedup's, its plan written to the output),
    the normal pass, then those after it (the writer's)."""
    output = open_storage(config.output_uri, run.input.s3_endpoint_url)
    with built_for_the_job():  # a million tasks
        normal = list(checked.reader.plan(checked.files, run.input.task_size, checked.storage))
    try:
        before, after = plan_stages(config, output, normal, checked.vocabulary.special, log)
    except Exception as error:
        raise JobError(f"--output {run.job.output}: cannot plan the stages before and after the normal pass: "
                       f"{error}") from None
    return Job(config, before + normal + after, checked.files, checked.skipped, checked.storage, checked.reader)
