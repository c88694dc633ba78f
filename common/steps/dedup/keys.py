"""A task's documents to the keys they are compared by: the exact hash of
the normalised text and, for ``--dedup minhash``, one hash per LSH band."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import numpy as np

from common.steps.dedup.minhash import MinHasher, band_hashes
from common.steps.dedup.normalise import exact_hash_of_nfc
from common.steps.dedup.settings import DedupSettings


@dataclass
class DocumentKeys:
    exact: np.ndarray  # uint64 [documents]; 0: empty text, compared with nothing
    bands: np.ndarray  # uint64 [documents, bands]; rows of too-short documents are unused
    shingled: np.ndarray  # bool [documents]: had at least one shingle (minhash only)

    @property
    def too_short(self) -> int:
        return int((~self.shingled).sum())


class KeyMaker:
    def __init__(self, settings: DedupSettings):
        self.settings = settings
        self.hasher = MinHasher(settings.ngram, settings.perm, settings.seed) if settings.uses_minhash else None

    def keys(self, texts: list[str]) -> DocumentKeys:
        nfc = [unicodedata.normalize("NFC", text) for text in texts]  # once, for both keys
        exact = np.fromiter(map(exact_hash_of_nfc, nfc), dtype=np.uint64, count=len(texts))
        if self.hasher is None:
            return DocumentKeys(exact, np.empty((len(texts), 0), dtype=np.uint64), exact != 0)
        signatures, shingled = self.hasher.signatures_of_folded([text.casefold() for text in nfc])
        bands = band_hashes(signatures, self.settings.bands, self.settings.rows)
        return DocumentKeys(exact, bands, shingled)

    def flat(self, keys: DocumentKeys, members: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(kind, key, member) rows: the exact hash (kind 0) of every non-empty
        document, band ``i`` (kind ``i + 1``) of every shingled one."""
        has_text = keys.exact != 0
        kinds = [np.zeros(int(has_text.sum()), dtype=np.uint16)]
        values = [keys.exact[has_text]]
        owners = [members[has_text]]
        shingled = keys.shingled if self.hasher is not None else np.zeros(len(members), dtype=bool)
        for band in range(keys.bands.shape[1]):
            kinds.append(np.full(int(shingled.sum()), band + 1, dtype=np.uint16))
            values.append(keys.bands[shingled, band])
            owners.append(members[shingled])
        return np.concatenate(kinds), np.concatenate(values), np.concatenate(owners)
