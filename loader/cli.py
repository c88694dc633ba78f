"""``python -m loader --data OUT [--port 5560]``: serve a finished output to trainer ranks."""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

import common.one_blas_thread  # noqa: F401  (before numpy: see the module)
from common import logs
from common.job.cli_settings import DeferredCommand, PluginFailure, command_option, command_settings
from common.job.params import PluginError
from common.storage import Storage, StorageError
from common.wire.security import Curve, SecurityError
from common.wire.transport import ListenError
from loader.batches import ServingParams
from loader.masking import MaskingParams
from loader.mixture import MixError
from loader.sample_masking import SampleMasking
from loader.server import LOADER_PORT, LoaderServer, ServerOptions
from loader.shards import DatasetError, open_dataset, splits
from loader.sources import Mixture, mixture_phases, open_sources
from loader.token_batches import TokenBudget
from loader.token_layout import LAYOUTS

if TYPE_CHECKING:
    from common.tokenization.vocabulary import Vocabulary

log = logging.getLogger("loader")


def mask_ids(vocab_file: str | None, tokenizer: str | None) -> tuple[int, int]:
    """(the mask token's id, the vocabulary size) of the tokenizer the output was made with, loaded as the
    pipeline loads it (vocab.txt, tokenizers JSON, SentencePiece .model or a model directory)."""
    from common.tokenization import load_vocabulary  # as the ventilator loads it: the model directory's roles too

    hint = "--tokenizer" if tokenizer else "--vocab-file"
    try:
        special = load_vocabulary(vocab_file, tokenizer).special
    except (OSError, ValueError) as error:
        raise click.BadParameter(str(error).splitlines()[0], param_hint=hint) from None
    if special.mask is None:
        raise click.BadParameter(f"{tokenizer or vocab_file} has no mask token", param_hint=hint)
    return special.mask, special.vocab_size


def load_tokenizer_roles(vocab_file: str | None, tokenizer: str | None) -> Vocabulary:
    """The tokenizer's Vocabulary (special ids, word starts), loaded as the pipeline loads it."""
    from common.tokenization import load_vocabulary

    hint = "--tokenizer" if tokenizer else "--vocab-file"
    try:
        return load_vocabulary(vocab_file, tokenizer)
    except (OSError, ValueError) as error:
        raise click.BadParameter(str(error).splitlines()[0], param_hint=hint) from None


def token_budget(batch_tokens: int, layout: str, pack_window: int, dynamic_masking: bool, vocab_file: str | None,
                 tokenizer: str | None, mask_id: int | None, vocab_size: int | None, masked_lm_prob: float,
                 whole_word: bool) -> TokenBudget:
    """--batch-tokens' settings: the samples' masking from the tokenizer (special ids never masked, the pieces'
    word starts for --whole-word-mask where the tokenizer marks them per piece) and its pad id."""
    from common.tokenization.word_boundaries import WORD_IDS

    vocabulary = load_tokenizer_roles(vocab_file, tokenizer) if (vocab_file or tokenizer) else None
    pad_id = vocabulary.pad_id if vocabulary is not None and vocabulary.pad_id is not None else 0
    masking = None
    if dynamic_masking:
        if vocabulary is not None:
            if vocabulary.mask_id is None:
                raise click.BadParameter(f"{tokenizer or vocab_file} has no mask token",
                                         param_hint="--tokenizer" if tokenizer else "--vocab-file")
            mask_id, vocab_size = vocabulary.mask_id, vocabulary.size
        elif mask_id is None or vocab_size is None:
            raise click.UsageError("--dynamic-masking needs --vocab-file or --tokenizer, or both --mask-id and "
                                   "--vocab-size")
        if mask_id >= vocab_size:
            raise click.UsageError(f"--mask-id {mask_id} is not below --vocab-size {vocab_size}")
        specials = tuple(sorted({i for role, i in vocabulary.roles.items() if role != "unk" and i is not None})) \
            if vocabulary is not None else ()
        starts_word = vocabulary.starts_word if vocabulary is not None and vocabulary.boundaries.kind != WORD_IDS \
            else None
        masking = SampleMasking(mask_id, vocab_size, masked_lm_prob, whole_word, specials, starts_word)
    return TokenBudget(batch_tokens, layout, pack_window, masking, pad_id)


def with_recorded_specials(tokens: TokenBudget, storage: Storage) -> TokenBudget:
    """Token-budget batches without --vocab-file or --tokenizer: the special ids (never masked: a chunk's
    [CLS] and [SEP], which its samples do not mark) and the pad id from the job's tokenizer, as the output's
    dataset_info.json records it."""
    from common.describe import dataset_info

    try:
        specials = dataset_info.special_token_ids(dataset_info.read(storage))
    except ValueError as error:
        raise DatasetError(f"{storage.uri('')}: {error}") from None
    if not specials:
        log.warning("loader: %s does not record its tokenizer's special tokens; pass --vocab-file or --tokenizer "
                    "so that they are never masked", storage.uri(""))
        return tokens
    masking = tokens.masking
    if masking is not None and not masking.special_ids:
        masking = dataclasses.replace(masking, special_ids=tuple(sorted(
            {i for role, i in specials.items() if role != "unk"})))
    return dataclasses.replace(tokens, masking=masking, pad_id=specials.get("pad", tokens.pad_id))


def refuse_idle_flags(ctx: click.Context, batch_tokens: int | None, dynamic_masking: bool) -> None:
    """UsageError naming each option given (on the command line or by its variable) that does nothing with the
    rest, as the ventilator refuses a step's flags while the step is off: a flag accepted and ignored would have
    the trainer believe it took (--masked-lm-prob without --dynamic-masking: the output's own masks, or none)."""
    from click.core import ParameterSource

    idle: dict[str, str] = {}
    if batch_tokens is not None:
        idle["batch_size"] = "--batch-tokens sizes each batch"
    if not dynamic_masking:
        for name in ("masked_lm_prob", "max_predictions_per_seq", "mask_id", "vocab_size"):
            idle[name] = "--dynamic-masking is off (the records are served with the masks they were written with)"
    given = [(f"--{name.replace('_', '-')}", why) for name, why in idle.items()
             if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)]
    if given:
        raise click.UsageError("; ".join(f"{flag} does nothing here: {why}" for flag, why in given))


def check_batchable(storage: Storage, batch_tokens: int | None) -> None:
    """UsageError if the output's records vary in length (--objective tokens, say: dataset_info.json says so)
    and no --batch-tokens is given: fixed-size batches cannot hold them, whatever the shards' health."""
    from common.describe import dataset_info

    if batch_tokens is not None:
        return
    try:
        info = dataset_info.read(storage)
    except ValueError:
        return  # the shards' reader says what is wrong
    shape = ((info or {}).get("features", {}).get("input_ids") or {}).get("shape") or []
    if shape and shape[0] is None:
        raise click.UsageError(f"--data {storage.uri('')} holds records of varying length (its input_ids, as "
                               f"{dataset_info.DATASET_INFO} says): serve them with --batch-tokens N, token-budget "
                               "batches (docs/loader.md)")


def _split_help() -> str:
    """``--split``'s help, naming each step's side (``Step.sides``) and what makes it."""
    from common.steps import sides

    named = ", or ".join(f"the {side.label} side ({side.flag})" for side in sides())
    return f"The side to serve: the training side{', or ' + named if named else ''} for evaluation."


def _output_options(command: Callable) -> Callable:
    """``--data`` and ``--split``, made when the command is first used (:class:`DeferredCommand`): the sides
    are the steps' (installed plugins' too), so importing the loader finds no step, and a plugin that cannot
    be loaded is the command's one line, ``--help`` included."""
    command = command_option("--split", type=click.Choice(splits()), default="train", show_envvar=True,
                           help=_split_help())(command)
    return command_option("--data", required=True, multiple=True, metavar="OUT", show_envvar=True,
                        help="A finished output of this project (directory, s3://bucket/prefix or gs://bucket/prefix), "
                             "read through its manifest.  Several: a mixture (OUT=WEIGHT, --weights, --temperature "
                             "or --mix-schedule; docs/loader.md, Mixtures).")(command)


@click.command(cls=DeferredCommand, options=_output_options, context_settings=command_settings("loader"))
@command_option("--allow-partial", is_flag=True, show_envvar=True,
              help="Serve an output whose job has not finished (no summary.json, or tasks quarantined): what is "
                   "in its manifest so far.")
@command_option("--port", type=click.IntRange(1, 65535), default=LOADER_PORT, show_envvar=True,
              help="Port trainer ranks connect to.")
@command_option("--bind-host", default="*", show_envvar=True, help="Interface to listen on (* for all).")
@command_option("--batch-size", type=click.IntRange(min=1), default=256, show_envvar=True,
              help="Records per batch, per rank.")
@command_option("--seed", type=int, default=0, show_envvar=True, help="Every epoch's order and masks derive from it.")
@command_option("--shuffle-window", type=click.IntRange(min=1), default=65536, show_envvar=True,
              help="Records shuffled together after the shards are shuffled (a full shuffle if >= the records).")
@command_option("--dynamic-masking", is_flag=True, show_envvar=True,
              help="Draw new masks per (seed, epoch, record) from the restored original tokens.")
@command_option("--vocab-file", type=click.Path(dir_okay=False), default=None, show_envvar=True,
              help="With --dynamic-masking: the vocab.txt the output was made with ([MASK] id, vocabulary size).")
@command_option("--tokenizer", type=click.Path(), default=None, show_envvar=True,
              help="With --dynamic-masking: the tokenizer the output was made with instead (tokenizers JSON, "
                   "SentencePiece .model or a local model directory).")
@command_option("--mask-id", type=click.IntRange(min=0), default=None, show_envvar=True,
              help="With --dynamic-masking and no --vocab-file: the [MASK] token's id.")
@command_option("--vocab-size", type=click.IntRange(min=1), default=None, show_envvar=True,
              help="With --dynamic-masking and no --vocab-file: ids drawn for the 10% random replacements.")
@command_option("--masked-lm-prob", type=click.FloatRange(0, 1, min_open=True), default=0.15, show_envvar=True,
              help="With --dynamic-masking: share of each sequence's tokens to mask.")
@command_option("--max-predictions-per-seq", type=click.IntRange(min=1), default=None, show_envvar=True,
              help="With --dynamic-masking of an unmasked output (--masking none): mask slots per record.",
              derived="ceil(length x --masked-lm-prob)")
@command_option("--whole-word-mask", is_flag=True, show_envvar=True,
              help="With --dynamic-masking: mask whole words (the records' word_starts: --objective roberta --masking "
                   "none, electra --word-starts; Chinese words with --word-segmenter), as BERT's "
                   "--do-whole-word-mask does.")
@command_option("--batch-tokens", type=click.IntRange(min=1), default=None, show_envvar=True,
              help="Token-budget batches instead of --batch-size rows: whole samples (variable-length records, "
                   "e.g. --objective tokens), at most this many tokens a batch per rank.",
              described="off")
@command_option("--batch-layout", type=click.Choice(LAYOUTS), default=None, show_envvar=True,
              help="With --batch-tokens: flat (one row, position_ids, cu_seq_lens_q/k, max_length_q/k: "
                   "DataCollatorWithFlattening's flash-attention kwargs) or padded (similar lengths, padded to the "
                   "longest, attention_mask).",
              described="flat")
@command_option("--pack-window", type=click.IntRange(min=1), default=None, show_envvar=True,
              help="With --batch-tokens: consecutive samples of the shuffled epoch packed together.",
              described="4096")
@command_option("--weights", default=None, show_envvar=True,
              help="With several --data: each one's share of the tokens, in order (0.7,0.3; normalized).")
@command_option("--temperature", type=click.FloatRange(0, 10), default=None, show_envvar=True,
              help="With several --data: shares proportional to each one's tokens ** this (XLM-R: 0.3).")
@command_option("--mix-schedule", type=click.Path(dir_okay=False, exists=True), default=None, show_envvar=True,
              help="With several --data: a JSON file of phases, each from a token count with its weights or "
                   "temperature (docs/loader.md, Mixtures).")
@command_option("--max-prefetch", type=click.IntRange(min=1), default=16, show_envvar=True,
              help="The most batches a rank may have in flight (its client asks for fewer or as many).")
@command_option("--cache-mb", type=click.IntRange(min=1), default=1024, show_envvar=True,
              help="Decoded shards kept in memory; give it at least one shuffle window's worth.")
@command_option("--curve-dir", type=click.Path(file_okay=False), default=None, show_envvar=True,
              help="Encrypt and authenticate with CURVE keys from this directory (made by mlm-keys).")
@command_option("--s3-endpoint-url", default=None, show_envvar=True, help="An S3-compatible endpoint for s3:// data.")
@command_option("--metrics-port", type=click.IntRange(0, 65535), default=None, show_envvar=True,
              help="Serve Prometheus metrics (ranks, batches and bytes sent, cache) on this port.",
              described="off")
@command_option("--report-seconds", type=float, default=30.0, show_envvar=True, help="Throughput log interval.")
@command_option("-v", "--verbose", count=True, help="More logging.")
def main(data: tuple[str, ...], split: str, allow_partial: bool, port: int, bind_host: str, batch_size: int,
         seed: int, shuffle_window: int, dynamic_masking: bool, vocab_file: str | None, tokenizer: str | None,
         mask_id: int | None, vocab_size: int | None, masked_lm_prob: float, max_predictions_per_seq: int | None,
         whole_word_mask: bool, batch_tokens: int | None, batch_layout: str | None, pack_window: int | None,
         weights: str | None, temperature: float | None, mix_schedule: str | None, max_prefetch: int, cache_mb: int,
         curve_dir: str | None, s3_endpoint_url: str | None, metrics_port: int | None, report_seconds: float,
         verbose: int) -> None:
    """Serve batches of a finished output to every trainer rank.

    Each rank (client library: loader.client.LoaderClient) gets a disjoint
    part of every epoch; together they cover each record once per epoch, in
    an order that depends only on --seed and the epoch.  See docs/loader.md.
    """
    logs.configure(verbose)
    refuse_idle_flags(click.get_current_context(), batch_tokens, dynamic_masking)
    try:
        data, phases = mixture_phases(data, weights, temperature, mix_schedule)
    except MixError as error:
        raise click.UsageError(str(error)) from None
    masking = None
    if whole_word_mask and not dynamic_masking:
        raise click.UsageError("--whole-word-mask is for --dynamic-masking")
    tokens = None
    if batch_tokens is None and (batch_layout is not None or pack_window is not None):
        raise click.UsageError(f"{'--batch-layout' if batch_layout is not None else '--pack-window'} is for "
                               "--batch-tokens")
    if batch_tokens is not None:
        batch_layout, pack_window = batch_layout or "flat", pack_window or 4096
        if max_predictions_per_seq is not None:
            raise click.UsageError("--max-predictions-per-seq is for fixed-size batches: with --batch-tokens each "
                                   "sample's share is --masked-lm-prob of its length")
        tokens = token_budget(batch_tokens, batch_layout, pack_window, dynamic_masking, vocab_file, tokenizer,
                              mask_id, vocab_size, masked_lm_prob, whole_word_mask)
        batch_size = 0
    elif dynamic_masking:
        if vocab_file or tokenizer:
            mask_id, vocab_size = mask_ids(vocab_file, tokenizer)
        elif mask_id is None or vocab_size is None:
            raise click.UsageError("--dynamic-masking needs --vocab-file or --tokenizer, or both --mask-id and "
                                   "--vocab-size")
        if mask_id >= vocab_size:
            raise click.UsageError(f"--mask-id {mask_id} is not below --vocab-size {vocab_size}")
        masking = MaskingParams(mask_id, vocab_size, masked_lm_prob, max_predictions_per_seq, whole_word_mask)
    try:
        curve = Curve(curve_dir) if curve_dir else None
        mixture = None
        if phases is None:
            storage, shards = open_dataset(data[0], s3_endpoint_url, split=split, allow_partial=allow_partial)
            check_batchable(storage, batch_tokens)
        else:
            sources = open_sources(data, s3_endpoint_url, split, allow_partial, fixed_length=tokens is None)
            for source in sources:
                check_batchable(source.storage, batch_tokens)
            mixture = Mixture(sources, phases, seed, shuffle_window)
            storage, shards = sources[0].storage, mixture.shards
        if tokens is not None and not (vocab_file or tokenizer):
            tokens = with_recorded_specials(tokens, storage)
        options = ServerOptions(port=port, bind_host=bind_host, max_window=max_prefetch,
                                cache_bytes=cache_mb * 1024 * 1024, curve=curve, report_seconds=report_seconds,
                                metrics_port=metrics_port)
        params = ServingParams(batch_size, seed, shuffle_window, masking, tokens,
                               mixture.settings if mixture is not None else "")
        server = LoaderServer(storage, shards, params, options, mixture)
        sys.exit(server.run())
    except (DatasetError, StorageError, SecurityError, ListenError) as error:
        raise click.ClickException(str(error)) from None
    except PluginError as error:
        raise PluginFailure(str(error)) from None
