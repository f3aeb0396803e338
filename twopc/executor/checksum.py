"""The order-insensitive checksum of the records one transaction wrote: a multiset hash. Pure.

Recovery uses it to prove that a re-run wrote the same records as the run it replaces (docs/design.md
section 4); a re-run may deliver the same rows in another order, and keyless rows may land in other
Kafka partitions, so the checksum covers (topic, key, value, headers) of each record and nothing
about order, partition, offset or timestamp.

Construction (MSet-Add-Hash, Clarke et al. 2003): each record is mapped to a 64-bit pseudo-random
value and the checksum is their sum modulo 2**64. A sum, not a XOR: a record written twice must not
cancel out, the checksum is of a multiset. The record value comes from keyed SipHash-2-4 of each
field (a distinct key per field, so a key cannot pose as a value) combined by the murmur3 64-bit
finalizer, which ties each record's fields together (swapping keys between two records changes the
sum).

Why SipHash via pandas' vectorized `hash_array` rather than a keyed blake2b per record: this is the
writer's hot path, and a Python-level hash object per record costs 0.7-1 us on the machines we
measured, about half the cost of producing the record; `hash_array` hashes a whole chunk in
compiled code for about 0.15 us per 256-byte value. `hash_array` is public, documented as
deterministic, and its algorithm (SipHash-2-4 with a 16-byte key) has not changed since pandas 0.20;
a known-answer test pins it, and the version tag in the hex form changes if we ever change the
construction. 64 bits are enough: the checksum tells a deterministic re-run from a changed one (an
accident, not an adversary), and two different multisets collide with probability about 2**-64.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from twopc.executor.rows import encode_headers

if TYPE_CHECKING:
    from numpy.typing import NDArray

    U64 = NDArray[np.uint64]

VERSION = "m64v1"
_MASK = (1 << 64) - 1
# SipHash keys, one per field (16 bytes each, as hash_array requires).
_VALUE_KEY = "twopc:value:v1.."
_KEY_KEY = "twopc:key:v1...."
_TOPIC_KEY = "twopc:topic:v1.."
_HEADERS_KEY = "twopc:headers:v1"
# Stand-ins for "no key" and "no headers"; any fixed odd constants would do.
_NO_KEY = np.uint64(0x9E3779B97F4A7C15)
_NO_HEADERS = np.uint64(0xC2B2AE3D27D4EB4F)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


_hash_array: Callable[..., Any] | None = None
# One thread imports pandas, the others wait: two threads importing it at once (a writer's starter
# thread beside its caller, several writers in one process) can meet in its cyclic imports, and
# CPython then raises _DeadlockError or hands one a partly initialized module.
_import_lock = threading.Lock()


def warm_up() -> None:
    """Import the hashing now (pandas: ~0.25 s the first time in a process)."""
    _hasher()


def _hasher() -> Callable[..., Any]:
    global _hash_array
    if _hash_array is None:
        with _import_lock:
            if _hash_array is None:
                from pandas.util import hash_array  # heavy import: only when first needed

                _hash_array = hash_array
    return _hash_array


def _siphash(items: Sequence[Any], key: str, categorize: bool = False) -> U64:
    column = np.empty(len(items), dtype=object)
    column[:] = items
    hashes: U64 = _hasher()(column, hash_key=key, categorize=categorize)
    return hashes


def _fmix(x: U64) -> U64:
    """murmur3's 64-bit finalizer, element-wise (uint64 arithmetic wraps)."""
    x = x ^ (x >> _S33)
    x = x * _M1
    x = x ^ (x >> _S33)
    x = x * _M2
    return x ^ (x >> _S33)


def identity_hashes(topic: str, values: Sequence[bytes | str], keys: Sequence[bytes | str | None],
                    topic_overrides: Sequence[tuple[int, str]] = ()) -> U64:
    """Per record, a hash of (topic, key, value) without headers: what a delivery report still
    carries, so that a failed delivery can be traced back to its row."""
    n = len(values)
    hv = _siphash(values, _VALUE_KEY)
    missing = keys.count(None)
    if missing == n:
        hk = np.full(n, _NO_KEY, dtype=np.uint64)
    else:
        hk = _siphash(keys, _KEY_KEY)
        if missing:
            nulls = np.fromiter((k is None for k in keys), dtype=bool, count=n)
            hk[nulls] = _NO_KEY
    if topic_overrides:
        topics = [topic] * n
        for pos, name in topic_overrides:
            topics[pos] = name
        ht = _siphash(topics, _TOPIC_KEY, categorize=True)
    else:
        ht = np.full(n, _siphash([topic], _TOPIC_KEY)[0], dtype=np.uint64)
    return _fmix(hv ^ _fmix(hk ^ _fmix(ht)))


def record_hashes(identities: U64, headers: Sequence[tuple[int, bytes]] = ()) -> U64:
    """Per record, the multiset element: the identity hash with the encoded headers mixed in."""
    hh = np.full(len(identities), _NO_HEADERS, dtype=np.uint64)
    if headers:
        positions = [pos for pos, _ in headers]
        hh[positions] = _siphash([raw for _, raw in headers], _HEADERS_KEY)
    return _fmix(identities ^ hh)


class MultisetChecksum:
    """Accumulates the checksum chunk by chunk; chunking and order do not change the result."""

    def __init__(self) -> None:
        self._sum = 0
        self.count = 0

    def add_hashes(self, hashes: U64) -> None:
        self._sum = (self._sum + int(hashes.sum(dtype=np.uint64))) & _MASK
        self.count += len(hashes)

    def hexdigest(self) -> str:
        return f"{VERSION}:{self._sum:016x}"


Record = tuple[str, bytes | str | None, bytes | str, Sequence[tuple[str, Any]]]


def checksum_of(records: Iterable[Record]) -> str:
    """The checksum of (topic, key, value, headers) records: the writer's result, in one call."""
    topics: list[str] = []
    keys: list[bytes | str | None] = []
    values: list[bytes | str] = []
    headers: list[tuple[int, bytes]] = []
    for i, (topic, key, value, hdrs) in enumerate(records):
        topics.append(topic)
        keys.append(key)
        values.append(value)
        if hdrs:
            headers.append((i, encode_headers(hdrs)))
    acc = MultisetChecksum()
    if values:
        overrides = [(i, t) for i, t in enumerate(topics)]
        acc.add_hashes(record_hashes(identity_hashes(topics[0], values, keys, overrides),
                                     headers))
    return acc.hexdigest()
