"""The trainer's side: an iterator of numpy batches from a loader server,
with thin adapters to PyTorch and tf.data (each imported only when used).

    client = LoaderClient("loader-host:5560", rank=rank, world_size=world_size, state=checkpoint.get("loader"))
    for batch in client:                      # dicts of numpy arrays, endless (epoch after epoch)
        step(batch)
        checkpoint["loader"] = client.state()  # a small dict: where the next batch starts

A client restarted with a saved state continues with exactly the batch
that would have come next.  The client also survives the server going
away: when the server restarts (or forgets it), the client attaches again
from its state and drops whatever it had prefetched.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zmq

from common.wire.security import Curve
from common.wire.transport import endpoint, make_socket, parse_address
from loader import messages
from loader.layout import Field, RecordLayout
from loader.order import MAX_EMPTY_EPOCHS
from loader.token_layout import LAYOUTS, lay_out

if TYPE_CHECKING:
    from torch.utils.data import IterableDataset

log = logging.getLogger("loader.client")

DEFAULT_PORT = 5560


class LoaderError(RuntimeError):
    """The server refused this client (reason in the message), or never answered."""


@dataclass
class Batch:
    features: dict[str, np.ndarray]  # run_pretraining.py's names plus attention_mask and labels
    epoch: int
    index: int  # the batch's number within the epoch, for this rank
    record_ids: np.ndarray  # each row's record (global index in the manifest's order)
    last_in_epoch: bool
    pad_id: int = 0  # what padded rows are filled with (the server's; token-budget batches)

    def to_model_inputs(self, model_or_attn_impl: Any, device: Any = "cpu") -> dict:
        """What ``model(**inputs)`` takes safely, as tensors on ``device``: a flat batch's flash-attention varlen
        kwargs when the model (or the attention implementation named) runs flash attention, else its samples as
        padded rows with ``attention_mask``, so no token attends across samples (loader/model_inputs.py)."""
        from loader.model_inputs import to_model_inputs

        return to_model_inputs(self.features, model_or_attn_impl, device, self.pad_id)


def hf_views(features: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Adds Hugging Face's names: ``attention_mask`` (the input mask itself,
    not a copy) and ``labels`` (the original id at masked positions, -100
    elsewhere), computed here rather than sent, to save bandwidth."""
    out = dict(features)
    if "input_mask" in features:
        out["attention_mask"] = features["input_mask"]
    if {"input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"} <= set(features):
        labels = np.full(features["input_ids"].shape, -100, dtype=np.int64)
        rows, slots = np.nonzero(features["masked_lm_weights"] > 0)
        labels[rows, features["masked_lm_positions"][rows, slots]] = features["masked_lm_ids"][rows, slots]
        out["labels"] = labels
    return out


@dataclass
class _Position:
    epoch: int = 0
    batch: int = 0


@dataclass
class _Session:
    """One attach: its number, the server's answer, batches consumed since."""

    number: int = 0
    attached: messages.Attached | None = None
    consumed: int = 0


class LoaderClient:
    """One rank's stream of batches.

    ``prefetch`` batches are in flight at most (built by the server, on the
    wire or queued here): memory on both sides is bounded by it.  The socket
    belongs to the thread that iterates.
    """

    def __init__(self, address: str, rank: int = 0, world_size: int = 1, state: dict | None = None,
                 prefetch: int = 4, curve_dir: str | None = None, hf: bool = True,
                 patience_seconds: float = 2.0, timeout_seconds: float | None = None):
        host, port = parse_address(address, DEFAULT_PORT)
        self.address = endpoint(host, port)
        self.rank, self.world_size = rank, world_size
        self.prefetch = max(1, prefetch)
        self.hf = hf
        self.patience = patience_seconds
        self.timeout = timeout_seconds
        self.client_id = f"rank{rank}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._resumed = dict(state) if state else None
        self._position = _Position()
        if state:
            if (state.get("rank"), state.get("world_size")) != (rank, world_size):
                raise LoaderError(f"the state is of rank {state.get('rank')} of {state.get('world_size')}, "
                                  f"this client is rank {rank} of {world_size}")
            self._position = _Position(int(state["epoch"]), int(state["batch"]))
        self._session = _Session()
        self._context = zmq.Context()
        self._curve = Curve(curve_dir) if curve_dir else None
        self._socket: zmq.Socket | None = None
        self.reattaches = 0
        self._record_layout: RecordLayout | None = None
        self._known: messages.Attached | None = None  # the last server answer, whatever the session

    # Public ------------------------------------------------------------
    def state(self) -> dict:
        """Where the next batch starts, and what it was taken with: checkpoint this."""
        attached = self._known
        base = self._resumed or {}
        return {"epoch": self._position.epoch, "batch": self._position.batch, "rank": self.rank,
                "world_size": self.world_size,
                "dataset": attached.dataset if attached else base.get("dataset", ""),
                "seed": attached.seed if attached else base.get("seed"),
                "batch_size": attached.batch_size if attached else base.get("batch_size"),
                "dynamic_masking": attached.dynamic_masking if attached else base.get("dynamic_masking"),
                "batch_tokens": attached.batch_tokens if attached else base.get("batch_tokens"),
                "layout": attached.layout if attached else base.get("layout"),
                "order": attached.order if attached else base.get("order")}

    @property
    def info(self) -> messages.Attached:
        """The server's description of the stream (features, batches per epoch)."""
        while self._session.attached is None:
            self._connect_if_needed()
            self._receive_one(control_only=True)
        return self._session.attached

    def next_batch(self) -> Batch:
        self._connect_if_needed()
        while True:
            batch = self._receive_one()
            if batch is not None:
                break
        self._session.consumed += 1
        self._position = _Position(batch.epoch + 1, 0) if batch.last_in_epoch else _Position(batch.epoch,
                                                                                               batch.index + 1)
        self._send(messages.Credit(self._session.number, self._session.consumed))
        return batch

    def __iter__(self) -> LoaderClient:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        return self.next_batch().features

    def epoch_batches(self) -> Iterator[dict[str, np.ndarray]]:
        """The batches left in the current epoch (all of it at an epoch's start)."""
        while True:
            batch = self.next_batch()
            yield batch.features
            if batch.last_in_epoch:
                return

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        self._context.term()

    def __enter__(self) -> LoaderClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Adapters ----------------------------------------------------------
    def torch_dataset(self) -> IterableDataset:
        """A ``torch.utils.data.IterableDataset`` of dicts of tensors; use it
        with ``DataLoader(dataset, batch_size=None, num_workers=0)``: the
        server batches and the client prefetches.  A worker process is
        refused: it would iterate a copy of this client, so ``state()`` here
        would never move and a resume would replay the epoch.  Token-budget
        batches' ``max_length_q/k`` come as Python ints (what flash-attention's
        varlen functions take).  These are the batches as laid out: a flat one
        given to an SDPA or eager model as it is attends across samples
        (``Batch.to_model_inputs``, ``loader.torch_data.LoaderDataset``)."""
        import torch
        from torch.utils.data import IterableDataset, get_worker_info

        client = self

        class _LoaderDataset(IterableDataset):
            def __iter__(self) -> Iterator[dict[str, Any]]:  # tensors, and max_length_q/k as ints
                if get_worker_info() is not None:
                    raise LoaderError("use DataLoader(..., num_workers=0): in a worker process the client's state() "
                                      "would not follow the batches, and a resume would replay them (the server "
                                      "batches and the client prefetches already)")
                for features in client:
                    yield {name: torch.from_numpy(np.ascontiguousarray(array)) if array.ndim else array.item()
                           for name, array in features.items()}

        return _LoaderDataset()

    def tf_dataset(self) -> Any:  # a tf.data.Dataset: tensorflow has no type information
        """A ``tf.data.Dataset`` of dicts of tensors (shapes and dtypes from the server)."""
        import tensorflow as tf

        if self.info.batch_tokens:
            raise LoaderError("tf_dataset() serves fixed-size batches: use the client's own iterator or "
                              "torch_dataset() for --batch-tokens")
        specs = {spec.name: tf.TensorSpec((None, spec.width), tf.as_dtype(spec.dtype)) for spec in self.info.features}
        if self.hf and "input_mask" in specs:
            specs["attention_mask"] = specs["input_mask"]
            if "masked_lm_ids" in specs:
                specs["labels"] = tf.TensorSpec(specs["input_ids"].shape, tf.int64)
        return tf.data.Dataset.from_generator(lambda: iter(self), output_signature=specs)

    # Wire ---------------------------------------------------------------
    def _connect_if_needed(self) -> None:
        if self._socket is None:
            sock = make_socket(self._context, zmq.DEALER, max_message_bytes=-1, linger_ms=0)
            if self._curve:
                self._curve.connect_as_client(sock)
            sock.connect(self.address)
            self._socket = sock
            self._attach()

    def _attach(self) -> None:
        """(Re)start the stream from the position the trainer has reached."""
        session = _Session(self._session.number + 1)
        self._session = session
        state = self.state()
        self._send(messages.Attach(self.client_id, session.number, self.rank, self.world_size,
                                   self._position.epoch, self._position.batch, self.prefetch,
                                   state["dataset"] or "", state["seed"], state["batch_size"],
                                   state["dynamic_masking"], state["batch_tokens"], state["layout"],
                                   state["order"] or None))

    def _send(self, message: object) -> None:
        """Never blocks: with no connection up (server down, CURVE refused) the
        message is dropped, and restated after the next silence."""
        try:
            self._socket.send(messages.encode(message), zmq.NOBLOCK)
        except zmq.Again:
            pass

    def _receive_one(self, control_only: bool = False) -> Batch | None:
        """Handle one message; the batch if it was the next one."""
        started = time.monotonic()
        while not self._socket.poll(int(self.patience * 1000)):
            # Silence: say where we are again.  A server that does not know
            # us (restarted) answers Unknown, and we attach again.
            if self.timeout is not None and time.monotonic() - started > self.timeout:
                raise LoaderError(f"no answer from the loader at {self.address} for {self.timeout:.0f} s")
            if self._session.attached is None:
                self._attach()
            else:
                self._send(messages.Credit(self._session.number, self._session.consumed))
        frames = self._socket.recv_multipart(copy=False)
        try:
            message = messages.decode(frames[0].bytes)
        except messages.MessageError as error:
            log.warning("loader client: dropped a malformed message from the server: %s", error)
            return None
        session = self._session
        if isinstance(message, messages.Attached):
            if message.session == session.number:
                self._check_attached(message)
                session.attached = self._known = message
            return None
        if isinstance(message, messages.Refused):
            if message.session == session.number:
                raise LoaderError(f"the loader at {self.address} refused rank {self.rank}: {message.reason}")
            return None
        if isinstance(message, messages.Unknown):
            if message.session == session.number:
                log.info("loader client: the server does not know rank %d (restarted?): attaching again", self.rank)
                self.reattaches += 1
                self._attach()
            return None
        if not isinstance(message, messages.BatchHeader) or message.session != session.number or control_only:
            return None  # another session's, or a reply we did not ask for
        position = self._position
        # the batch that comes next: the position's, or at an epoch's start a later epoch's first (the server
        # passes over an epoch that deals this rank no batch)
        expected = (message.epoch, message.batch) == (position.epoch, position.batch) or (
            position.batch == 0 and message.batch == 0 and 0 < message.epoch - position.epoch < MAX_EMPTY_EPOCHS)
        if session.attached is None or not expected:
            # Not the batch that comes next (cannot happen on one connection): start again from our state.
            self.reattaches += 1
            self._attach()
            return None
        return self._batch(message, frames[1:])

    def _check_attached(self, attached: messages.Attached) -> None:
        """The server checks the same (and refuses): this catches a server of another version.  Its features
        are hostile input too: a dtype numpy cannot read a record of fixed numbers from is one LoaderError."""
        expected = self.state()["dataset"]
        if expected and expected != attached.dataset:
            raise LoaderError(f"the loader at {self.address} serves dataset {attached.dataset}, not {expected}")
        if attached.batch_tokens or attached.layout:
            if attached.layout not in LAYOUTS:
                raise LoaderError(f"the loader at {self.address} sends batch layout {attached.layout[:40]!r}: this "
                                  f"client lays out {', '.join(LAYOUTS)}")
            if not attached.batch_tokens:
                raise LoaderError(f"the loader at {self.address} sends batch layout {attached.layout!r} without a "
                                  "token budget")
            if attached.pad_id > np.iinfo(np.int32).max:
                raise LoaderError(f"the loader at {self.address} sends pad id {attached.pad_id}: it is not a token "
                                  "id (int32)")
        for spec in attached.features:
            try:
                kind = np.dtype(spec.dtype).kind
            except (TypeError, ValueError):
                kind = ""
            if kind not in ("b", "i", "u", "f"):
                raise LoaderError(f"the loader at {self.address} sends feature {spec.name!r} as {spec.dtype[:40]!r}, "
                                  f"which is not a fixed-size number")

    def _batch(self, header: messages.BatchHeader, frames: Sequence[zmq.Frame]) -> Batch:
        if self._session.attached.batch_tokens:
            return self._token_batch(header, frames)
        layout = self._layout()
        if len(frames) != 2 or len(frames[0]) != header.rows * layout.row_bytes or len(frames[1]) != 8 * header.rows:
            raise LoaderError("malformed batch from the server")
        # One copy: the trainer gets writable arrays it may keep, not views of a zmq buffer.
        matrix = np.frombuffer(frames[0].buffer, dtype=np.uint8).reshape(header.rows, layout.row_bytes).copy()
        features = layout.views(matrix)
        record_ids = np.frombuffer(frames[1].buffer, dtype=np.int64).copy()
        if self.hf:
            features = hf_views(features)
        return Batch(features, header.epoch, header.batch, record_ids, header.last_in_epoch)

    def _token_batch(self, header: messages.BatchHeader, frames: Sequence[zmq.Frame]) -> Batch:
        """A token-budget batch: the samples' tokens end to end and their lengths, laid out as the server says."""
        layout, attached = self._layout(), self._session.attached
        if len(frames) != 3 or header.tokens < 1 or header.rows < 1 or \
                len(frames[0]) != header.tokens * layout.row_bytes or len(frames[1]) != 8 * header.rows or \
                len(frames[2]) != 4 * header.rows:
            raise LoaderError("malformed batch from the server")
        lengths = np.frombuffer(frames[2].buffer, dtype="<i4")
        if (lengths < 1).any() or int(lengths.sum(dtype=np.int64)) != header.tokens or \
                int(lengths.max()) > attached.batch_tokens:
            raise LoaderError("malformed batch from the server: its sample lengths do not add up")
        # What the layout costs, within the budget as the server packs it: the tokens (flat), rows x the longest
        # (padded): never a matrix the wire's few bytes would make huge.
        cost = header.tokens if attached.layout == "flat" else header.rows * int(lengths.max())
        if cost > attached.batch_tokens:
            raise LoaderError(f"malformed batch from the server: {cost} {attached.layout} token slots, over its "
                              f"budget of {attached.batch_tokens}")
        matrix = np.frombuffer(frames[0].buffer, dtype=np.uint8).reshape(header.tokens, layout.row_bytes)
        tokens = {name: view.reshape(-1) for name, view in layout.views(matrix).items()}
        features = lay_out(attached.layout, tokens, lengths, attached.pad_id)  # new arrays: the trainer may keep them
        record_ids = np.frombuffer(frames[1].buffer, dtype=np.int64).copy()
        return Batch(features, header.epoch, header.batch, record_ids, header.last_in_epoch, int(attached.pad_id))

    def _layout(self) -> RecordLayout:
        if self._record_layout is None:
            self._record_layout = RecordLayout(tuple(Field(f.name, f.dtype, f.width)
                                                     for f in self._session.attached.features))
        return self._record_layout

def server_status(address: str, curve_dir: str | None = None, timeout_seconds: float = 5.0) -> messages.Status:
    """The server's ranks (cursors, batches sent and allowed), dropped messages and cache: for operators and tests."""
    host, port = parse_address(address, DEFAULT_PORT)
    context = zmq.Context()
    sock = make_socket(context, zmq.DEALER, max_message_bytes=-1, linger_ms=0)
    try:
        if curve_dir:
            Curve(curve_dir).connect_as_client(sock)
        sock.connect(endpoint(host, port))
        sock.send(messages.encode(messages.StatusRequest()))
        if not sock.poll(int(timeout_seconds * 1000)):
            raise LoaderError(f"no status from the loader at {address} within {timeout_seconds:.0f} s")
        reply = messages.decode(sock.recv())
        if not isinstance(reply, messages.Status):
            raise LoaderError(f"the loader answered {type(reply).__name__} to a status request")
        return reply
    finally:
        sock.close(linger=0)
        context.term()
