"""Raw tar bytes for tests: 512-byte headers with a correct checksum and any field set to
anything, so tests can build the odd framings tarfile itself would never write."""

from __future__ import annotations

from typing import Mapping

BLOCK = 512
END = bytes(2 * BLOCK)
POSIX = b"ustar\x0000"
GNU = b"ustar  \x00"


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def pad(data: bytes) -> bytes:
    return data + bytes(-len(data) % BLOCK)


def checksum(block: bytes | bytearray) -> int:
    return sum(block[:148]) + 8 * 0x20 + sum(block[156:])


def header(
    name: str | bytes,
    kind: str = "0",
    *,
    size: int = 0,
    linkname: str | bytes = "",
    magic: bytes = POSIX,
    prefix: str | bytes = "",
    fields: Mapping[int, bytes] | None = None,
    chksum: int | None = None,
) -> bytes:
    """One header block; `fields` overwrites bytes at their offsets before the checksum is
    computed (unsigned, as tar writes it) unless `chksum` gives another."""
    block = bytearray(BLOCK)

    def put(offset: int, data: bytes) -> None:
        block[offset : offset + len(data)] = data

    put(0, _bytes(name))
    put(100, b"0000644\x00")
    put(108, b"0000000\x00")
    put(116, b"0000000\x00")
    put(124, b"%011o\x00" % size)
    put(136, b"%011o\x00" % 1_600_000_000)
    put(156, kind.encode("latin-1"))
    put(157, _bytes(linkname))
    put(257, magic)
    put(345, _bytes(prefix))
    for offset, data in (fields or {}).items():
        put(offset, data)
    put(148, b"%06o\x00 " % (checksum(block) if chksum is None else chksum))
    return bytes(block)


def member(name: str | bytes, kind: str = "0", data: bytes = b"", **kw: object) -> bytes:
    """A header and its data (size from the data unless given)."""
    kw.setdefault("size", len(data))
    return header(name, kind, **kw) + pad(data)  # type: ignore[arg-type]


def pax_record(key: str, value: str | bytes) -> bytes:
    body = b" " + key.encode() + b"=" + _bytes(value) + b"\n"
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def pax(records: Mapping[str, str | bytes] | bytes, kind: str = "x", padding: bytes = b"") -> bytes:
    """A pax extended ('x') or global ('g') header with its records (or raw record bytes);
    `padding` goes after the records, inside their last block."""
    data = records if isinstance(records, bytes) else b"".join(pax_record(k, v) for k, v in records.items())
    return header("././@PaxHeader", kind, size=len(data)) + pad(data + padding)


def long_name(name: str, kind: str = "L") -> bytes:
    """A GNU long name ('L') or long link name ('K') header with its record."""
    data = name.encode() + b"\x00"
    return header("././@LongLink", kind, size=len(data), magic=GNU) + pad(data)
