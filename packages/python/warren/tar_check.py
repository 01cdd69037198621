"""A streaming check of a downloaded tar archive's raw bytes, in front of Python's tarfile: the
same strict framing as the TS SDK's TarChecker (docs/api.md, "Directories"), so that both SDKs
refuse the same archives and no member can hide from the check behind a framing that two tar
readers read differently (GNU tar, node-tar and tarfile each have their own leniencies). Only
POSIX ustar and GNU headers; string fields NUL-padded; names UTF-8; well-formed octal or
positive base-256 numbers; unsigned checksums; pax `path`/`linkpath`/`size` and GNU long names,
strictly framed, one of each per member and always followed by it; no data and no link name
where a member carries none; nothing but zeros after the end-of-archive block, which must be
there. Each member then passes the rules of tar_rules.py, and `CheckedSource.agree` refuses a
member tarfile read otherwise. Standard library only."""

from __future__ import annotations

import re
import tarfile
from collections import deque
from dataclasses import dataclass
from typing import IO, Any, Deque, Dict, Set

from .tar_rules import DIRECTORY, HARDLINK, REGULAR, SYMLINK, MemberRules, quote, refuse, refuse_archive

BLOCK = 512
# Largest pax or GNU long-name record kept whole (names are at most 4096 bytes on Linux).
MAX_META_BYTES = 1024 * 1024
# Sizes and numbers the TS side can hold exactly (Number.isSafeInteger).
MAX_NUMBER = 2**53
POSIX_MAGIC = b"ustar\x0000"
GNU_MAGIC = b"ustar  \x00"
META_TYPES = frozenset("xgLK")
# Numeric fields every header must hold well formed (the checksum, octal only, apart).
NUMBER_FIELDS = ((100, 8, "mode"), (108, 8, "uid"), (116, 8, "gid"), (124, 12, "size"))
# GNU tar and tarfile write a time before 1970 as negative base-256 (first byte 0xff).
MTIME_FIELD = (136, 12, "mtime")
# tarfile reads these too (a malformed one ends its reading without a word); GNU tar leaves
# them all NUL on anything but a device, so blank passes here.
DEVICE_FIELDS = ((329, 8, "devmajor"), (337, 8, "devminor"))
_OCTAL = re.compile(rb" *([0-7]+)[ \x00]+")
_BLANK = re.compile(rb"[ \x00]*")
_PAX_LENGTH = re.compile(rb"([0-9]+) ")
_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


@dataclass(frozen=True)
class Member:
    """One member as the check read it (kind: its type flag)."""

    kind: str
    name: str
    linkname: str
    size: int


def _number(block: bytes, start: int, length: int, what: str, at: int, octal_only: bool = False, blank: bool = False, negative: bool = False) -> int:
    """Octal digits between spaces and then at least one NUL or space, or base-256 with a first
    byte of 0x80, or of 0xff (negative) where `negative` allows it (its value is not needed)."""
    field = block[start : start + length]
    if negative and field[0] == 0xFF:
        return -1
    if field[0] == 0x80 and not octal_only:
        value = int.from_bytes(field[1:], "big")
        if value >= MAX_NUMBER:
            raise refuse_archive(f"a base-256 {what} too large in the header at byte {at}")
        return value
    octal = _OCTAL.fullmatch(field)
    if octal:
        return int(octal.group(1), 8)
    if blank and _BLANK.fullmatch(field):
        return 0
    shown = quote(field.decode("ascii")) if field.isascii() else f"(bytes {field.hex(' ')})"
    raise refuse_archive(f"a malformed {what} field {shown} in the header at byte {at}")


def _field(block: bytes, start: int, length: int, what: str, at: int) -> bytes:
    """A string field up to its first NUL; nothing but NULs may follow it (readers that stop
    at a newline or at the field's end would read more)."""
    head, _, tail = block[start : start + length].partition(b"\x00")
    if tail.strip(b"\x00"):
        raise refuse_archive(f"bytes after the end of the {what} in the header at byte {at}")
    return head


def _utf8(data: bytes, what: str, at: int) -> str:
    # Decoders disagree on invalid bytes; tarfile's own (utf-8, surrogateescape) agrees on valid ones.
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise refuse_archive(f"{what} at byte {at} is not UTF-8") from None


def _pax_records(data: bytes, at: int) -> Dict[str, bytes]:
    """Pax records ("LEN key=value\\n"), each framed exactly by its length, no key twice, no
    newline in a value (node-tar splits at newlines); NULs may follow the last one."""
    out: Dict[str, bytes] = {}
    pos = 0
    while pos < len(data):
        if data[pos] == 0:
            if data[pos:].strip(b"\x00"):
                raise refuse_archive(f"bytes after the NULs that end the pax header at byte {at}")
            break
        match = _PAX_LENGTH.match(data, pos)
        end = pos + int(match.group(1)) if match else -1
        if not match or end <= match.end() or end > len(data) or data[end - 1] != 0x0A:
            raise refuse_archive(f"a malformed pax record in the header at byte {at}")
        key, eq, value = data[match.end() : end - 1].partition(b"=")
        if not eq or not key:
            raise refuse_archive(f"a pax record without a key in the header at byte {at}")
        name = key.decode("latin-1")
        if b"\n" in value:
            raise refuse_archive(f"a newline in the pax value of {quote(name)} in the header at byte {at}")
        if name in out:
            raise refuse_archive(f"the pax key {quote(name)} twice in the header at byte {at}")
        out[name] = value
        pos = end
    return out


class TarChecker:
    """Fed the archive's bytes in order (`push`), then `end`. Members it accepted queue up in
    `members` for `CheckedSource.agree`."""

    def __init__(self) -> None:
        self.members: Deque[Member] = deque()
        self._rules = MemberRules()
        self._count = 0
        self._state = "header"  # header, body, meta, done
        self._header = bytearray()
        self._remaining = 0  # bytes of the current body, with its padding, still to come
        self._meta = bytearray()
        self._meta_kind = ""
        self._meta_size = 0
        self._meta_at = 0
        self._offset = 0
        # What pax 'x' and GNU 'L'/'K' headers said about the next member.
        self._kinds: Set[str] = set()
        self._next: Dict[str, Any] = {}

    def push(self, data: bytes) -> None:
        """Checks the next bytes; raises on the first refused member or bad block."""
        view = memoryview(data)
        while view:
            if self._state == "done":
                if any(view):
                    raise refuse_archive(f"data after its end-of-archive block (near byte {self._offset})")
                self._offset += len(view)
                return
            if self._state in ("body", "meta"):
                n = min(self._remaining, len(view))
                if self._state == "meta":
                    self._meta += view[:n]
                self._remaining -= n
                self._offset += n
                view = view[n:]
                if self._remaining == 0:
                    if self._state == "meta":
                        self._finish_meta()
                    self._state = "header"
                continue
            n = min(BLOCK - len(self._header), len(view))
            self._header += view[:n]
            self._offset += n
            view = view[n:]
            if len(self._header) == BLOCK:
                block, self._header = bytes(self._header), bytearray()
                self._on_header(block, self._offset - BLOCK)

    def end(self) -> None:
        """After the last byte: the archive must have ended with its end-of-archive block (a
        download cut at a member's end would look whole otherwise); every symlink is checked again."""
        if self._state != "done":
            if self._state == "header" and not self._header:
                raise refuse_archive(f"no end-of-archive block (after {self._offset} bytes): cut short?")
            raise refuse_archive(f"it ends in the middle of a member (after {self._offset} bytes)")
        if self._count == 0:
            raise refuse_archive("no member")
        self._rules.end()

    def _on_header(self, block: bytes, at: int) -> None:
        if not any(block):
            if self._kinds:
                raise refuse_archive(f"metadata headers without their member before the end (byte {at})")
            self._state = "done"
            return
        if sum(block[:148]) + 8 * 0x20 + sum(block[156:]) != _number(block, 148, 8, "checksum", at, octal_only=True):
            raise refuse_archive(f"bad header checksum at byte {at}")
        if at == 0 and (block.startswith(_GZIP) or block.startswith(_ZSTD)):
            raise refuse_archive("it looks compressed (gzip or zstd); send a plain tar stream")
        magic = block[257:265]
        if magic != POSIX_MAGIC and magic != GNU_MAGIC:
            raise refuse_archive(f"a header that is neither POSIX ustar nor GNU at byte {at} (magic {quote(magic.decode('latin-1'))})")
        posix = magic == POSIX_MAGIC
        # tarfile joins these bytes as a prefix whatever the magic; GNU tar and node-tar do not.
        if not posix and any(block[345:500]):
            raise refuse_archive(f"a GNU header with data in its prefix field at byte {at}")
        numbers = {what: _number(block, start, length, what, at) for start, length, what in NUMBER_FIELDS}
        _number(block, *MTIME_FIELD, at, negative=True)
        for start, length, what in DEVICE_FIELDS:
            _number(block, start, length, what, at, blank=True)
        size, kind = numbers["size"], chr(block[156])
        raw_name = _field(block, 0, 100, "name field", at)
        raw_link = _field(block, 157, 100, "link name field", at)
        prefix = _field(block, 345, 155, "prefix field", at) if posix else b""
        if kind in META_TYPES:
            if not raw_name or raw_link:
                raise refuse_archive(f"a metadata header without a name or with a link name at byte {at}")
            self._start_meta(kind, size, at)
            return
        # Fields a pax record or GNU long name replaced are not read (they may hold a name cut mid-character).
        name = self._next.get("path")
        if name is None:
            name = _utf8(raw_name, "the name field", at)
            if prefix:
                name = f"{_utf8(prefix, 'the prefix field', at)}/{name}"
        linkname = self._next.get("linkpath")
        if linkname is None:
            linkname = _utf8(raw_link, "the link name field", at)
        if kind in (DIRECTORY, SYMLINK, HARDLINK) and size != 0:
            raise refuse(name, f"a header with a size ({size}) on a member that carries no data")
        member = Member(kind, name, linkname, self._next.get("size", size))
        self._kinds, self._next = set(), {}
        self._rules.check(member.kind, member.name, member.linkname, member.size)
        self._count += 1
        self.members.append(member)
        self._remaining = -(-member.size // BLOCK) * BLOCK if kind in REGULAR else 0
        self._state = "body" if self._remaining else "header"

    def _start_meta(self, kind: str, size: int, at: int) -> None:
        if kind == "g" and self._kinds:
            raise refuse_archive(f"a global header between a member's metadata and the member (byte {at})")
        if kind in self._kinds:
            raise refuse_archive(f"two {quote(kind)} headers for one member (byte {at})")
        if size > MAX_META_BYTES:
            raise refuse_archive(f"a {size}-byte metadata record at byte {at}")
        if kind != "g":
            self._kinds.add(kind)
        self._meta_kind, self._meta_size, self._meta_at = kind, size, at
        self._meta = bytearray()
        self._remaining = -(-size // BLOCK) * BLOCK
        self._state = "meta" if self._remaining else "header"
        if not self._remaining:
            self._finish_meta()

    def _finish_meta(self) -> None:
        kind, at = self._meta_kind, self._meta_at
        data, padding = bytes(self._meta[: self._meta_size]), self._meta[self._meta_size :]
        # tarfile reads a long name or pax records up to the block's end, padding included.
        if any(padding):
            raise refuse_archive(f"bytes in the padding after the metadata record at byte {at}")
        if kind in "LK":
            head, _, tail = data.partition(b"\x00")
            if not head or tail.strip(b"\x00"):
                raise refuse_archive(f"a GNU long name that is empty or has bytes after its NUL at byte {at}")
            self._set_next("path" if kind == "L" else "linkpath", _utf8(head, "a GNU long name", at), at)
            return
        records = _pax_records(data, at)
        for key in records:
            if key.startswith("GNU.sparse."):
                raise refuse_archive(f"sparse members are not supported (pax key {quote(key)} at byte {at})")
            # node-tar takes a pax type as the member's type; GNU tar and tarfile ignore it.
            if key == "type":
                raise refuse_archive(f"a pax type record at byte {at}")
        if kind == "g":
            # A global path, link or size would change every member after it: nobody needs that here.
            if {"path", "linkpath", "size"} & records.keys():
                raise refuse_archive(f"a global header sets path, linkpath or size at byte {at}")
            return
        for key in ("path", "linkpath"):
            value = records.get(key)
            if value is None:
                continue
            if b"\x00" in value:
                raise refuse_archive(f"a NUL in a pax {key} at byte {at}")
            self._set_next(key, _utf8(value, f"a pax {key}", at), at)
        size = records.get("size")
        if size is not None:
            if not re.fullmatch(rb"[0-9]+", size) or int(size) >= MAX_NUMBER:
                raise refuse_archive(f"a bad pax size {quote(size.decode('latin-1'))} at byte {at}")
            self._next["size"] = int(size)

    def _set_next(self, key: str, value: str, at: int) -> None:
        if key in self._next:
            raise refuse_archive(f"a member given its {key} twice (a GNU long name and a pax {key}) at byte {at}")
        self._next[key] = value


def _kind(kind: str) -> str:
    return "file" if kind in REGULAR else {DIRECTORY: "directory", SYMLINK: "symlink", HARDLINK: "hard link"}.get(kind, kind)


def _tarfile_kind(member: tarfile.TarInfo) -> str:
    if member.isreg():
        return "file"
    return "directory" if member.isdir() else "symlink" if member.issym() else "hard link" if member.islnk() else repr(member.type)


def _parts(name: str) -> list[str]:
    return [p for p in name.split("/") if p not in ("", ".")]


class CheckedSource:
    """The archive as tarfile reads it (`read(n)`), each byte passed on only after the check
    accepted it; `finish` reads the rest (tarfile stops at the first end-of-archive block)."""

    def __init__(self, source: IO[bytes] | Any) -> None:
        self._source = source
        self.checker = TarChecker()
        self._ended = False

    def read(self, size: int = -1) -> bytes:
        data = self._source.read(size)
        self.checker.push(data)
        if not data and size != 0:
            # At the source's end the check has the last word (an archive cut short is named
            # as such), before tarfile reports the same thing its own way.
            self._end()
        return bytes(data)

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self.checker.end()

    def agree(self, member: tarfile.TarInfo) -> None:
        """Refuses a member tarfile read otherwise than the check did (name, type, link target,
        size): the decision rests on what is actually extracted, so the two must see one archive."""
        theirs = (_parts(member.name), _tarfile_kind(member), member.linkname if member.issym() or member.islnk() else "", member.size)
        if not self.checker.members:
            raise refuse(member.name, "Python's tarfile read a member the check did not see")
        ours = self.checker.members.popleft()
        mine = (_parts(ours.name), _kind(ours.kind), ours.linkname if ours.kind in (SYMLINK, HARDLINK) else "", ours.size)
        if theirs != mine:
            raise refuse(ours.name, f"Python's tarfile read it as a {theirs[1]} {quote(member.name)} ({member.size} bytes), the check as a {mine[1]} ({ours.size} bytes)")

    def finish(self) -> None:
        """Passes the rest of the source through the check and ends it; every member it saw
        must have reached tarfile."""
        while True:
            data = self._source.read(64 * 1024)
            if not data:
                break
            self.checker.push(data)
        self._end()
        if self.checker.members:
            raise refuse(self.checker.members[0].name, "Python's tarfile did not read this member")
