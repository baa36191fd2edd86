"""Independent Python implementation of the origin stub's generated content.

Spec (talon-generated-v1):

* ``stream_key`` = first 8 bytes (little-endian u64) of
  SHA-256(b"talon-generated-v1\\0" + bucket + b"/" + key + b"\\0" + str(seed)).
* word ``i`` = splitmix64(stream_key + (i + 1) * 0x9E3779B97F4A7C15 mod 2^64).
* The object's bytes are the little-endian bytes of word 0, word 1, ...
  truncated to the size; byte ``o`` is byte ``o % 8`` of word ``o // 8``.
* ETag = quoted lowercase hex of the first 16 bytes of
  SHA-256(b"talon-generated-v1\\0" + bucket + "/" + key + "\\0" + str(seed)
  + "\\0" + str(size)).

The fast path is vectorised with numpy (uint64 arithmetic wraps mod 2^64);
``_reference_bytes`` is a slow pure-Python version used to self-check it.
"""

from __future__ import annotations

import hashlib

import numpy as np

_PREFIX = b"talon-generated-v1\0"
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_MASK = (1 << 64) - 1

# Words generated per numpy batch (8 MiB of output per batch).
_BATCH_WORDS = 1 << 20


def _identity(bucket: str, key: str, seed: int) -> bytes:
    return _PREFIX + bucket.encode("utf-8") + b"/" + key.encode("utf-8") + b"\0" + str(seed).encode("ascii")


def stream_key(bucket: str, key: str, seed: int = 0) -> int:
    return int.from_bytes(hashlib.sha256(_identity(bucket, key, seed)).digest()[:8], "little")


def generated_etag(bucket: str, key: str, size: int, seed: int = 0) -> str:
    """Quoted ETag of a generated object, e.g. ``'"0123...ef"'``."""
    digest = hashlib.sha256(_identity(bucket, key, seed) + b"\0" + str(size).encode("ascii")).digest()
    return '"' + digest[:16].hex() + '"'


def _splitmix64_py(z: int) -> int:
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def _words_np(skey: int, first: int, count: int) -> np.ndarray:
    """Words ``first .. first+count`` as a little-endian uint64 array."""
    idx = np.arange(first + 1, first + 1 + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(skey) + idx * np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
        z = z ^ (z >> np.uint64(31))
    return z.astype("<u8", copy=False)


def _iter_chunks(bucket: str, key: str, seed: int, start: int, end: int):
    """Yield the bytes of ``[start, end)`` in chunks of at most 8 MiB."""
    if start < 0 or end < start:
        raise ValueError(f"bad range {start}..{end}")
    skey = stream_key(bucket, key, seed)
    pos = start
    while pos < end:
        first_word = pos // 8
        last_word = min((end + 7) // 8, first_word + _BATCH_WORDS)
        chunk = _words_np(skey, first_word, last_word - first_word).tobytes()
        lo = pos - first_word * 8
        hi = min(end - first_word * 8, len(chunk))
        yield chunk[lo:hi]
        pos = first_word * 8 + hi


def generated_bytes(bucket: str, key: str, seed: int, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` (end exclusive) of the generated object's stream."""
    return b"".join(_iter_chunks(bucket, key, seed, start, end))


def sha256_of_generated(bucket: str, key: str, size: int, seed: int = 0) -> str:
    """Hex SHA-256 of the whole generated object of ``size`` bytes."""
    h = hashlib.sha256()
    for chunk in _iter_chunks(bucket, key, seed, 0, size):
        h.update(chunk)
    return h.hexdigest()


def _reference_bytes(bucket: str, key: str, seed: int, start: int, end: int) -> bytes:
    """Slow, literal pure-Python transcription of the spec (for self-checks)."""
    skey = stream_key(bucket, key, seed)
    out = bytearray()
    for o in range(start, end):
        word = _splitmix64_py((skey + (o // 8 + 1) * _GOLDEN) & _MASK)
        out.append((word >> (8 * (o % 8))) & 0xFF)
    return bytes(out)


def parse_size(text: str) -> int:
    """Parse the stub's SIZE syntax: bytes or with KiB/MiB/GiB suffix."""
    for suffix, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * mult
    return int(text)


if __name__ == "__main__":  # self-check: python generated.py
    import random
    import time

    rng = random.Random(1234)
    cases = [("b", "k", 0, 0, 0), ("b", "k", 0, 0, 1), ("b", "k", 0, 0, 8), ("b", "k", 0, 3, 21),
             ("bucket", "dir/ünïcødé key+%.bin", 7, 0, 4099), ("bkt", "x", 2**63, 5, 64)]
    for _ in range(30):
        a = rng.randrange(0, 50000)
        cases.append((f"b{rng.randrange(9)}", f"k/{rng.randrange(99)}", rng.randrange(3), a, a + rng.randrange(0, 3000)))
    for b, k, s, a, e in cases:
        assert generated_bytes(b, k, s, a, e) == _reference_bytes(b, k, s, a, e), (b, k, s, a, e)
    # chunk boundary crossing
    n = _BATCH_WORDS * 8
    for a, e in ((n - 13, n + 29), (n - 8, n), (2 * n - 1, 2 * n + 1)):
        assert generated_bytes("b", "k", 0, a, e) == _reference_bytes("b", "k", 0, a, e), (a, e)
    full = generated_bytes("b", "k", 1, 0, 3 * n + 5)
    assert hashlib.sha256(full).hexdigest() == sha256_of_generated("b", "k", 3 * n + 5, 1)
    assert full[n - 3 : 2 * n + 9] == generated_bytes("b", "k", 1, n - 3, 2 * n + 9)
    t = time.time()
    digest = sha256_of_generated("bench", "64m", 64 << 20)
    print(f"64 MiB sha256 {digest} in {time.time() - t:.2f}s")
    print("etag example", generated_etag("b", "k", 100))
    print("ok")
