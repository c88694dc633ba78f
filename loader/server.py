"""The loader server's event loop: one ROUTER socket, one owner thread.

Ranks connect with DEALER sockets, say where they are (Attach: rank, world
size, next epoch and batch) and grant credit as their trainer consumes
batches.  The server builds a batch only when the rank has credit for it,
so each rank has at most ``window`` batches in flight (built, queued or in
its socket) whatever its speed: a rank that stops pulling costs nothing
more.  The server keeps no other per-rank state than a cursor, which the
client can always restate, so a restarted server (or another one) carries
on from the clients' states.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import zmq

from common.metrics import MetricsServer, counter, gauge
from common.storage import Storage, StorageError
from common.wire.inbox import Handlers, Inbox, Sender, serving
from common.wire.security import Curve
from common.wire.transport import DroppedMessages, listen
from loader import messages
from loader.batches import BatchMaker, ServingParams
from loader.order import MAX_EMPTY_EPOCHS
from loader.samples import SampleCache
from loader.shards import DatasetError, ShardCache, ShardList
from loader.sources import MixedCache, Mixture
from loader.token_batches import TokenBatchMaker, padding_waste

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("loader")

LOADER_PORT = 5560


@dataclass
class ServerOptions:
    port: int = LOADER_PORT
    bind_host: str = "*"
    max_window: int = 16  # the most batches a rank may have in flight
    cache_bytes: int = 1 << 30  # decoded shards kept
    curve: Curve | None = None
    report_seconds: float = 30.0
    forget_seconds: float = 3600.0  # a rank silent this long is forgotten (it attaches again if it comes back)
    metrics_port: int | None = None  # Prometheus metrics on this port (0: any free one)


@dataclass
class _Rank:
    identity: bytes
    client_id: str
    session: int
    rank: int
    world_size: int
    epoch: int  # the next batch to send
    batch: int
    batches_per_epoch: int
    window: int
    sent: int = 0
    allowed: int = 0
    last_seen: float = 0.0


class LoaderServer:
    def __init__(self, storage: Storage, shards: ShardList, params: ServingParams, options: ServerOptions,
                 mixture: Mixture | None = None):
        """``mixture``: several outputs (loader/sources.py); ``storage`` and ``shards`` are then its first's and
        its combined shard list."""
        self.shards = shards
        self.params = params
        self.options = options
        self.mixture = mixture
        orders = mixture.order if mixture is not None else None
        cache: ShardCache | SampleCache | MixedCache
        if params.tokens is None:
            cache = mixture.make_cache(options.cache_bytes, False) if mixture else \
                ShardCache(storage, shards, options.cache_bytes)
            self.maker = BatchMaker(cache, params, orders)
        else:
            cache = mixture.make_cache(options.cache_bytes, True) if mixture else \
                SampleCache(storage, shards, options.cache_bytes)
            self.maker = TokenBatchMaker(cache, params, orders)
        self.cache = cache
        self.server_id = uuid.uuid4().hex[:12]
        self.ranks: dict[bytes, _Rank] = {}
        self.dropped = DroppedMessages("loader")
        self.inbox = Inbox(messages.CODEC, self.dropped)
        self._handlers = (Handlers().on(messages.Attach, self._on_attach).on(messages.Credit, self._credit)
                          .on(messages.StatusRequest, self._status_request))
        self.batches_sent = 0
        self.bytes_sent = 0
        self.shard_failures = 0  # batches that could not be built (their rank was told)
        self.tokens_sent = 0  # token-budget batches: tokens served, and the slots a trainer computes on
        self.token_slots = 0
        self.stopping = False
        self._features: list[messages.FeatureSpec] | None = None

    def _on_signal(self, name: str) -> None:
        log.info("loader: %s, stopping", name)
        self.stopping = True

    def run(self) -> int:
        with serving(zmq.ROUTER, self.options.curve, self._on_signal, max_message_bytes=messages.MAX_INBOUND_BYTES,
                     linger_ms=0) as router:
            return self._serve(router)

    def _serve(self, router: zmq.Socket) -> int:
        metrics = None
        try:
            listen(router, self.options.bind_host, self.options.port)
            self._check_cache()
            if self.options.metrics_port is not None:
                metrics = MetricsServer(self.metrics, self.options.metrics_port, self.options.bind_host)
            log.info("loader %s: %d records in %d shards (dataset %s), batch %s, seed %d, %s, listening on port %d",
                     self.server_id, self.shards.records, len(self.shards.names), self.shards.fingerprint,
                     self.params.batch_size if self.params.tokens is None else
                     f"<= {self.params.tokens.budget} tokens ({self.params.tokens.layout})", self.params.seed,
                     "dynamic masking" if self.params.dynamic_masking else "masks as stored", self.options.port)
            self._loop(router)
            return 0
        finally:
            if metrics is not None:
                metrics.close()

    def _check_cache(self) -> None:
        """Reads the first shard now (a bad output fails before any rank waits) and
        warns when one shuffle window's records do not fit the cache: it would then
        reread shards within a window (correct, but slow).  Token-budget batches
        read every sample's length now (and refuse a sample over the budget)."""
        if self.params.tokens is not None:
            self.maker.prepare()
            if self.mixture is not None:
                self.mixture.plan()
            return
        if self.mixture is not None:
            self.mixture.plan()  # every source's layout read and compared
        row_bytes = self.cache.layout_of().row_bytes
        try:
            self.maker.layout()
        except ValueError as error:
            raise DatasetError(f"{self.cache.storage.uri('')}: {error}") from None
        window = min(self.params.window, self.shards.records)
        largest = int(self.shards.counts.max())
        needed = (window + 2 * largest) * row_bytes
        if needed > self.options.cache_bytes:
            log.warning("loader: a shuffle window (%d records, %d bytes each, plus the shards at its ends) needs "
                        "~%.0f MB of cache, more than --cache-mb %.0f: raise --cache-mb or lower --shuffle-window",
                        window, row_bytes, needed / 2**20, self.options.cache_bytes / 2**20)

    def _loop(self, router: zmq.Socket) -> None:
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        last_report = last_housekeeping = time.monotonic()
        reported = (0, 0)
        while not self.stopping:
            busy = any(rank.sent < rank.allowed for rank in self.ranks.values())
            if poller.poll(0 if busy else 200):
                for _ in range(1000):  # what is there, then a round of batches
                    try:
                        frames = router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._receive(router, frames)
            self._serve_round(router)
            now = time.monotonic()
            if now - last_housekeeping > 5:
                self._forget_silent(now)
                last_housekeeping = now
            if now - last_report > self.options.report_seconds:
                batches, sent = self.batches_sent - reported[0], self.bytes_sent - reported[1]
                log.info("loader: %d ranks, %.0f batches/s, %.1f MB/s; %d shards cached (%.0f MB), %d dropped messages",
                         len(self.ranks), batches / (now - last_report), sent / 1e6 / (now - last_report),
                         len(self.cache), self.cache.bytes / 1e6, self.dropped.total)
                reported = (self.batches_sent, self.bytes_sent)
                last_report = now

    # Messages ---------------------------------------------------------
    def _receive(self, router: zmq.Socket, frames: list[bytes]) -> None:
        received = self.inbox.routed(frames)
        if received is not None:
            identity, message = received
            self.inbox.deliver(message, Sender(router, identity, messages.CODEC), self._handlers)

    def _on_attach(self, message: messages.Attach, sender: Sender) -> None:
        sender.reply(self._attach(sender.identity, message, sender.at))

    def _credit(self, message: messages.Credit, sender: Sender) -> None:
        rank = self.ranks.get(sender.identity)
        if rank is None:
            sender.reply(messages.Unknown(message.session))
        elif message.session == rank.session and message.consumed >= 0:
            rank.last_seen = sender.at
            # Nobody consumes what was not sent: a client claiming more gets no more than its window ahead.
            rank.allowed = max(rank.allowed, min(message.consumed, rank.sent) + rank.window)

    def _status_request(self, _message: messages.StatusRequest, sender: Sender) -> None:
        sender.reply(self.status())

    def _attach(self, identity: bytes, attach: messages.Attach, now: float) -> messages.Attached | messages.Refused:
        def refuse(reason: str) -> messages.Refused:
            log.warning("loader: refused %s (rank %d of %d): %s", attach.client_id, attach.rank, attach.world_size,
                        reason)
            return messages.Refused(attach.session, reason)

        params = self.params
        if not (attach.world_size >= 1 and 0 <= attach.rank < attach.world_size):
            self.dropped.drop("attach with a bad rank")
            return refuse(f"rank {attach.rank} of world size {attach.world_size}: needs 0 <= rank < world size")
        if attach.dataset and attach.dataset != self.shards.fingerprint:
            return refuse(f"the state is of dataset {attach.dataset}, this server serves {self.shards.fingerprint}")
        budget = params.tokens.budget if params.tokens else 0
        settings = (("seed", attach.seed, params.seed), ("batch size", attach.batch_size, params.batch_size),
                    ("dynamic masking", attach.dynamic_masking, params.dynamic_masking),
                    ("batch tokens", attach.batch_tokens, budget),
                    ("batch layout", attach.layout, params.tokens.layout if params.tokens else ""),
                    (f"order ({str(attach.order)[:80]}; this server's: {params.order})", attach.order, params.order))
        mismatched = [name for name, theirs, ours in settings if theirs is not None and theirs != ours]
        if mismatched:
            return refuse(f"the state was taken with another {', '.join(mismatched)} than this server's")
        if attach.epoch < 0:
            self.dropped.drop("attach with a bad position")
            return refuse(f"epoch {attach.epoch}: epochs count from 0")
        found = self._epoch_with_batches(attach.rank, attach.world_size, attach.epoch)
        if found is None:
            what = f"{self.shards.records} records" if not budget else \
                f"the {self.maker.partition(1, attach.epoch).records} batches of epoch {attach.epoch}"
            return refuse(f"{what} cannot give each of {attach.world_size} ranks a batch")
        epoch, batches = found
        if epoch != attach.epoch and attach.batch != 0:
            self.dropped.drop("attach with a bad position")
            return refuse(f"epoch {attach.epoch} batch {attach.batch}: this rank has no batch in epoch "
                          f"{attach.epoch}")
        if not 0 <= attach.batch < batches:
            self.dropped.drop("attach with a bad position")
            return refuse(f"epoch {attach.epoch} batch {attach.batch}: this rank has batches 0..{batches - 1}")
        for other, rank in list(self.ranks.items()):  # the same client on a new connection
            if rank.client_id == attach.client_id:
                del self.ranks[other]
        window = min(max(1, attach.window), self.options.max_window)
        self.ranks[identity] = _Rank(identity, attach.client_id, attach.session, attach.rank, attach.world_size,
                                     epoch, attach.batch, batches, window, allowed=window, last_seen=now)
        log.info("loader: rank %d of %d (%s) from epoch %d batch %d", attach.rank, attach.world_size,
                 attach.client_id, attach.epoch, attach.batch)
        return messages.Attached(attach.session, self.server_id, self.shards.fingerprint, self.shards.records,
                                 params.batch_size, params.seed, params.dynamic_masking, batches,
                                 self._feature_specs(), budget, params.tokens.layout if params.tokens else "",
                                 params.tokens.pad_id if params.tokens else 0, params.order)

    def _epoch_with_batches(self, rank: int, world_size: int, epoch: int) -> tuple[int, int] | None:
        """The first epoch from ``epoch`` that deals ``rank`` a batch, and how many it deals; None after
        MAX_EMPTY_EPOCHS without one.  A rank with no batch in an epoch (fewer batches than ranks: a mixture's or a
        token budget's epoch a batch shorter than the last) goes on to the next, as the others do after theirs."""
        for candidate in range(epoch, epoch + MAX_EMPTY_EPOCHS):
            partition = self.maker.partition(world_size, candidate)
            batches = partition.batches(rank)
            if batches:
                return candidate, batches
            if rank >= 2 * partition.records:  # epochs differ by a batch or so, not by half: none will reach it
                return None
        return None

    def _feature_specs(self) -> list[messages.FeatureSpec]:
        if self._features is None:
            self._features = [messages.FeatureSpec(f.name, f.dtype, f.width) for f in self.maker.layout().fields]
        return self._features

    def status(self) -> messages.Status:
        return messages.Status(
            self.server_id,
            [messages.RankStatus(r.client_id, r.rank, r.world_size, r.epoch, r.batch, r.sent, r.allowed)
             for r in self.ranks.values()],
            self.dropped.total, self.batches_sent, len(self.cache), self.cache.bytes, self.cache.loads,
            self.mixture.status() if self.mixture is not None else [])

    def metrics(self) -> Iterator[Metric]:
        """What Prometheus scrapes (common/metrics.py), read from the server's own state."""
        ranks = list(self.ranks.values())
        yield gauge("mlm_loader_ranks", "Ranks attached.", len(ranks))
        yield counter("mlm_loader_batches_sent", "Batches sent, all ranks.", self.batches_sent)
        yield counter("mlm_loader_bytes_sent", "Bytes of batches sent, all ranks.", self.bytes_sent)
        yield gauge("mlm_loader_batches_in_flight", "Batches sent and not yet consumed (credit-bounded), per rank.",
                    labels={str(r.rank): max(0, r.sent - (r.allowed - r.window)) for r in ranks}, label="rank")
        yield gauge("mlm_loader_cache_bytes", "Decoded shards held (bounded by --cache-mb).", self.cache.bytes)
        yield counter("mlm_loader_shard_loads", "Shards read and decoded.", self.cache.loads)
        yield counter("mlm_loader_shard_failures", "Batches that could not be built from their shards (the rank was "
                      "told).", self.shard_failures)
        yield counter("mlm_loader_dropped_messages", "Malformed or unexpected messages dropped.", self.dropped.total)
        if self.mixture is not None:
            shares = self.mixture.shares()
            yield counter("mlm_loader_source_tokens", "A mixture: tokens sent from each source, all ranks.",
                          labels={name: tokens for name, _, _, tokens in shares}, label="source")
            yield gauge("mlm_loader_source_share", "A mixture: each source's share of the tokens sent.",
                        labels={name: realized for name, _, realized, _ in shares}, label="source")
            yield gauge("mlm_loader_source_target_share", "A mixture: each source's target share in the phase now.",
                        labels={name: target for name, target, _, _ in shares}, label="source")
        if self.params.tokens is not None:
            yield counter("mlm_loader_tokens_sent", "Token-budget batches: tokens sent, all ranks.", self.tokens_sent)
            yield counter("mlm_loader_token_slots", "Token-budget batches: token slots a trainer computes on (the "
                          "budget per flat batch, rows x longest per padded one).", self.token_slots)
            yield gauge("mlm_loader_padding_waste", "Share of the token slots sent that hold no token "
                        "(1 - tokens / slots).", padding_waste(self.tokens_sent, self.token_slots))

    # Batches ----------------------------------------------------------
    def _serve_round(self, router: zmq.Socket) -> None:
        """One batch to each rank that has credit (fair between ranks)."""
        for rank in list(self.ranks.values()):
            if rank.sent >= rank.allowed:
                continue
            try:
                if rank.batch == 0:  # an epoch with no batch for this rank is passed over
                    found = self._epoch_with_batches(rank.rank, rank.world_size, rank.epoch)
                    if found is None:
                        raise DatasetError(f"epochs {rank.epoch} to {rank.epoch + MAX_EMPTY_EPOCHS - 1} have fewer "
                                           f"batches than the {rank.world_size} ranks: too little data for them")
                    rank.epoch = found[0]
                built = self.maker.build(rank.rank, rank.world_size, rank.epoch, rank.batch)
            except (DatasetError, StorageError, OSError) as error:
                self._fail_rank(router, rank, error)
                continue
            frames = [built.matrix, built.record_ids]
            if self.mixture is not None:
                self.mixture.count(built.record_ids, built.lengths)
            tokens = 0
            if built.lengths is not None:
                frames.append(built.lengths)
                tokens = len(built.matrix)
                self.tokens_sent += tokens
                self.token_slots += built.slots
            header = messages.BatchHeader(rank.session, rank.epoch, rank.batch, built.last_in_epoch,
                                          len(built.record_ids), tokens)
            router.send_multipart([rank.identity, messages.encode(header), *frames], copy=False)
            rank.sent += 1
            self.batches_sent += 1
            self.bytes_sent += built.matrix.nbytes
            if built.last_in_epoch:
                rank.epoch, rank.batch = rank.epoch + 1, 0
            else:
                rank.batch += 1

    def _fail_rank(self, router: zmq.Socket, rank: _Rank, error: Exception) -> None:
        """A shard this rank needs cannot be read (deleted, cut, store down): the
        rank is told why, and raises it; the server and the other ranks go on.
        The shard is read again on the next attach, so a passing fault heals."""
        reason = f"epoch {rank.epoch} batch {rank.batch} cannot be built: {error}"
        log.error("loader: rank %d (%s): %s", rank.rank, rank.client_id, reason)
        self.shard_failures += 1
        router.send_multipart([rank.identity, messages.encode(messages.Refused(rank.session, reason))])
        self.ranks.pop(rank.identity, None)

    def _forget_silent(self, now: float) -> None:
        for identity, rank in list(self.ranks.items()):
            if now - rank.last_seen > self.options.forget_seconds:
                log.info("loader: forgetting rank %d (%s), silent for %.0f s", rank.rank, rank.client_id,
                         now - rank.last_seen)
                del self.ranks[identity]
