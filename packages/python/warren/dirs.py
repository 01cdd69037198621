"""The host side of directory transfers, as the TS SDK's dirs.ts: packs a local directory
into a tar stream, and extracts a downloaded one. A download comes from inside a sandbox and
is hostile: its raw bytes pass the same strict check as in the TS SDK (tar_check.py) before
tarfile reads them, and tarfile must read every member as the check did; members with
absolute names or `..` are refused (not stripped); Python's `data` extraction filter refuses
links leading outside, members under such links and special files; the tree is extracted
into a temporary directory beside the destination, walked with lstat, and moved into place
only when all of that checked out; that directory is removed on any failure. A merge into
an existing destination has its symlinks checked again against what the destination already
holds (merge_check.py). Nothing is written outside the named destination. Standard library
only."""

from __future__ import annotations

import os
import secrets
import stat
import tarfile
from typing import IO, Any, Iterator, List

from .errors import InvalidArgumentError, WarrenError
from .tar_check import CheckedSource
from .merge_check import check_merged_links
from .tar_rules import check_tree, quote, refuse, refuse_archive

EXISTS_POLICIES = ("merge", "replace", "error")


class _Sink:
    """tarfile's output, handed on in the pieces written so far."""

    def __init__(self) -> None:
        self.parts: List[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def drain(self) -> Iterator[bytes]:
        parts, self.parts = self.parts, []
        yield from parts


def _portable(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # The sandbox's check refuses every other kind (as the TS packer, refuse it here, named).
    if not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
        raise InvalidArgumentError("invalid_argument", f"cannot upload {quote(info.name)}: not a file, directory or symlink")
    # No uids or user names of this host go into the sandbox (files belong to the caller there).
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add(tf: tarfile.TarFile, full: str, arcname: str) -> None:
    # tarfile skips sockets without a word; the upload would then lack a file the caller has.
    if stat.S_ISSOCK(os.lstat(full).st_mode):
        raise InvalidArgumentError("invalid_argument", f"cannot upload {quote(full)}: not a file, directory or symlink")
    tf.add(full, arcname=arcname, recursive=False, filter=_portable)


def pack_dir(local_dir: str | os.PathLike[str]) -> Iterator[bytes]:
    """A tar stream of `local_dir`'s contents, member by member (symlinks kept as links,
    modes and times kept). Memory holds at most one member's data at a time. POSIX pax:
    `ustar\\0` + `00` headers, long names, big sizes and sub-second or negative times in pax
    records, which the sandbox's strict check accepts (a file, directory, symlink or hard link
    to an earlier file, nothing else)."""
    root = os.fspath(local_dir)
    if not os.path.isdir(root) or os.path.islink(root):
        raise WarrenError("invalid_argument", f"{root!r} is not a directory")
    sink = _Sink()
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tf:  # type: ignore[call-overload]
        _add(tf, root, ".")
        yield from sink.drain()
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                full = os.path.join(dirpath, name)
                _add(tf, full, os.path.relpath(full, root))
                yield from sink.drain()
    yield from sink.drain()


def _check_name(member: tarfile.TarInfo) -> None:
    # The data filter strips a leading "/" silently; warren refuses instead, as the agent does.
    # (The raw check refused these already: this one is on tarfile's own reading.)
    for value, what in ((member.name, "name"), (member.linkname if member.islnk() else "", "hard link target")):
        if value.startswith("/"):
            raise refuse(member.name, f"absolute {what}s are not allowed")
        if ".." in value.split("/"):
            raise refuse(member.name, f"'..' components are not allowed in its {what}")


def _remove_tree(path: str) -> None:
    """Removes a tree this process made; directories are made writable first (an archive's
    0555 directory would otherwise stop the removal of a failed download half-way)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    if st.st_mode & 0o700 != 0o700:
        os.chmod(path, 0o700)
    for name in os.listdir(path):
        _remove_tree(os.path.join(path, name))
    os.rmdir(path)


def _merge_conflict(src: str, dst: str) -> str | None:
    for name in os.listdir(src):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        if not os.path.lexists(d):
            continue
        s_dir, d_dir = os.path.isdir(s) and not os.path.islink(s), os.path.isdir(d) and not os.path.islink(d)
        if s_dir and d_dir:
            deeper = _merge_conflict(s, d)
            if deeper:
                return deeper
        elif s_dir or d_dir:
            return f"{d} is a {'directory' if d_dir else 'non-directory'} here and a {'directory' if s_dir else 'non-directory'} in the download"
    return None


def _merge_into(src: str, dst: str) -> None:
    for name in os.listdir(src):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        if os.path.isdir(d) and not os.path.islink(d):
            _merge_into(s, d)
        else:
            os.replace(s, d)


def _place(tmp: str, dest: str, exists: str) -> None:
    """As placeDirectory in the protocol package: the same `exists` semantics both ways."""
    if not os.path.lexists(dest):
        os.rename(tmp, dest)
        return
    if not os.path.isdir(dest) or os.path.islink(dest):
        raise WarrenError("conflict", f"{dest} exists and is not a directory")
    if exists == "error":
        raise WarrenError("conflict", f"{dest} already exists")
    if exists == "replace":
        old = os.path.join(os.path.dirname(dest), f".warren-old-{secrets.token_hex(6)}")
        os.rename(dest, old)
        os.rename(tmp, dest)
        _remove_tree(old)
        return
    conflict = _merge_conflict(tmp, dest)
    if conflict:
        raise WarrenError("conflict", f"cannot merge the download into {dest}: {conflict}")
    _merge_into(tmp, dest)
    _remove_tree(tmp)


def extract_dir(source: IO[bytes] | Any, local_dir: str | os.PathLike[str], exists: str = "merge") -> None:
    """Extracts the tar stream `source` (anything with read(n)) to `local_dir` by `exists`
    ('merge', 'replace' or 'error'). Modes lose set-id bits and group/other write (the data
    filter's rule); owners are never taken from the archive. Refuses (WarrenError
    'invalid_argument', nothing written) every archive the TS SDK refuses: the rules are in
    tar_check.py and tar_rules.py."""
    if exists not in EXISTS_POLICIES:
        raise WarrenError("invalid_argument", f"exists must be one of {', '.join(EXISTS_POLICIES)}")
    dest = os.path.abspath(os.fspath(local_dir))
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    if os.path.lexists(dest) and (not os.path.isdir(dest) or os.path.islink(dest)):
        raise WarrenError("conflict", f"{dest} exists and is not a directory")
    if os.path.lexists(dest) and exists == "error":
        raise WarrenError("conflict", f"{dest} already exists")
    tmp = os.path.join(parent, f".warren-download-{secrets.token_hex(6)}")
    os.mkdir(tmp, 0o700)
    checked = CheckedSource(source)
    try:
        with tarfile.open(fileobj=checked, mode="r|") as tf:  # type: ignore[call-overload]
            for member in tf:
                checked.agree(member)
                _check_name(member)
                try:
                    tf.extract(member, tmp, filter="data")
                except tarfile.FilterError as err:
                    raise refuse(member.name, str(err)) from None
        checked.finish()
        links = check_tree(tmp)
        # Replace and a fresh destination take the tree alone, which check_tree checked whole.
        if exists == "merge" and links and os.path.isdir(dest) and not os.path.islink(dest):
            check_merged_links(tmp, dest, links)
        _place(tmp, dest, exists)
    except tarfile.TarError as err:
        _remove_tree(tmp)
        raise refuse_archive(str(err)) from None
    except BaseException:
        _remove_tree(tmp)
        raise
