"""The rules on the members of a downloaded tar archive, apart from how they are framed in
bytes (tar_check.py); the same as the TS protocol package's tar-members.ts, since the TS and
Python SDKs must refuse the same archives (docs/api.md, "Directories"):

- names are relative and plain: no empty, absolute or NUL name, no `..`, `.` or empty
  component (a leading `./` and a directory's trailing `/` aside);
- nothing is written through or under a non-directory of the archive, nor replaces a member
  (a directory may be repeated);
- a symlink's target, resolved through the archive's other symlinks, stays inside (checked
  again at the end against every symlink: a later one can change what an earlier target means);
- a hard link names a regular file earlier in the archive;
- only files, directories and links; only files carry data, only links carry a link name.

`check_tree` applies the link rules again to what was actually extracted. Standard library only."""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Dict, List, Optional, Protocol

from .errors import InvalidArgumentError, WarrenError

# Symlink hops while resolving a target, as the kernel's limit (ELOOP).
MAX_HOPS = 40
# Components walked and bytes of targets followed in one resolution (as in tar-members.ts).
MAX_RESOLVE_STEPS = 256
MAX_RESOLVE_BYTES = 8192
# Bytes in a member name or link name, and components in a member name: as MAX_NAME_BYTES and
# MAX_NAME_COMPONENTS in tar-members.ts, which say why (PATH_MAX; no real tree is 128 deep, and
# extractors work per member in proportion to depth times length).
MAX_NAME_BYTES = 4096
MAX_NAME_COMPONENTS = 128
REGULAR, DIRECTORY, SYMLINK, HARDLINK = frozenset("0\x00"), "5", "2", "1"
REGULAR_KIND = "0"
_KINDS = REGULAR | {DIRECTORY, SYMLINK, HARDLINK}
_NAMES = {REGULAR_KIND: "file", DIRECTORY: "directory", SYMLINK: "symlink", HARDLINK: "hard link"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def quote(name: str) -> str:
    """`name` JSON-quoted as the TS side's JSON.stringify does: control characters, and the
    lone surrogates undecodable bytes become, arrive escaped."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(name, ensure_ascii=False))


def refuse(name: str, why: str) -> WarrenError:
    return InvalidArgumentError("invalid_argument", f"refused tar member {quote(name)}: {why}", details={"member": name})


def refuse_archive(why: str) -> WarrenError:
    return InvalidArgumentError("invalid_argument", f"refused tar archive: {why}")


def _bytes(name: str) -> int:
    """Bytes of a name as UTF-8, as Buffer.byteLength counts them (a lone surrogate, from an
    undecodable byte, counts as the 3 bytes JS would write for it)."""
    return len(name.encode("utf-8", "surrogatepass"))


def member_components(name: str, directory: bool = False) -> List[str]:
    """Components of a member name ([] for the root, `.` or `./`). Refuses empty, absolute and
    NUL names, `..`, `.` and empty components (but a leading `./`), and a trailing `/` unless
    `directory`: names any two extractors read as the same path."""
    if name == "":
        raise refuse(name, "a member without a name")
    size = _bytes(name)
    if size > MAX_NAME_BYTES:
        raise refuse(f"{name[:200]}...", f"a name of {size} bytes, over the limit of {MAX_NAME_BYTES} (PATH_MAX)")
    if "\x00" in name:
        raise refuse(name, "a name with a NUL byte")
    if name.startswith("/"):
        raise refuse(name, "absolute names are not allowed")
    if name in (".", "./"):
        return []
    rest = name[2:] if name.startswith("./") else name
    if rest.endswith("/"):
        if not directory:
            raise refuse(name, "a name ending in '/' on a member that is not a directory")
        rest = rest[:-1]
    parts = rest.split("/")
    if len(parts) > MAX_NAME_COMPONENTS:
        raise refuse(name, f"a name of {len(parts)} components, over the limit of {MAX_NAME_COMPONENTS} (no real tree is that deep)")
    if ".." in parts:
        raise refuse(name, "'..' components are not allowed")
    if "" in parts or "." in parts:
        raise refuse(name, "empty or '.' components are not allowed")
    return parts


class LinkLookup(Protocol):
    """Normalized path -> symlink target: a dict of an archive's symlinks, or the merged view
    of a download over its destination (merge_check.py)."""

    def get(self, path: str, /) -> Optional[str]: ...


def _climbs_after_name(target: str) -> bool:
    """As climbsAfterName in tar-members.ts: `d/..` climbs back over a name a later merged
    download can turn into a symlink (`e -> d/d/../..`, then `d -> .`)."""
    named = False
    for c in target.split("/"):
        if c == "..":
            if named:
                return True
        elif c not in ("", "."):
            named = True
    return False


def symlink_escape(link_path: str, target: str, links: LinkLookup) -> str | None:
    """Where a symlink's target leads, resolved through `links` (one lookup per component):
    None when it stays inside the root, else why not. Dangling targets inside are fine."""
    if target == "":
        return "empty symlink target"
    if target.startswith("/"):
        return f"points to the absolute path {quote(target)}"
    if _climbs_after_name(target):
        return f"its target {quote(target)} has '..' after a name ('..' may only begin a target)"
    stack = link_path.split("/")[:-1]
    # Components still to walk, the next one last (as symlinkEscape; so are the bounds).
    pending = target.split("/")[::-1]
    hops = steps = 0
    size = len(target)
    while pending:
        c = pending.pop()
        if c in ("", "."):
            continue
        steps += 1
        if steps > MAX_RESOLVE_STEPS:
            return f"its target {quote(target)} resolves through more than {MAX_RESOLVE_STEPS} components"
        if c == "..":
            if not stack:
                return f"its target {quote(target)} leads outside the destination"
            stack.pop()
            continue
        stack.append(c)
        following = links.get("/".join(stack))
        if following is None:
            continue
        hops += 1
        if hops > MAX_HOPS:
            return f"its target {quote(target)} loops through symlinks"
        stack.pop()
        if following.startswith("/"):
            return f"its target {quote(target)} leads outside the destination"
        size += len(following)
        if size > MAX_RESOLVE_BYTES:
            return f"its target {quote(target)} resolves through more than {MAX_RESOLVE_BYTES} bytes of link targets"
        pending.extend(reversed(following.split("/")))
    return None


class _Name:
    """A name of the archive, as NameNode in tar-members.ts: the kind of its member (None for a
    parent no member named) and the names under it; one node per component keeps the rules
    linear in the bytes of the names, however deep."""

    __slots__ = ("kind", "children")

    def __init__(self) -> None:
        self.kind: Optional[str] = None
        self.children: Dict[str, _Name] = {}


class MemberRules:
    """The rules on a sequence of members, in archive order; `end` re-checks every symlink
    against all of them (a later one can change what an earlier target means)."""

    def __init__(self) -> None:
        self.root = _Name()  # the archive's names (normalized), from the destination down
        self.links: Dict[str, str] = {}

    def _find(self, parts: List[str]) -> Optional[_Name]:
        node: Optional[_Name] = self.root
        for part in parts:
            if node is None:
                break
            node = node.children.get(part)
        return node

    def _place(self, parts: List[str]) -> _Name:
        node = self.root
        for part in parts:
            child = node.children.get(part)
            if child is None:
                child = node.children[part] = _Name()
            node = child
        return node

    def check(self, kind: str, name: str, linkname: str, size: int) -> str:
        """Refuses the member or returns its normalized path ('' for the root)."""
        if kind not in _KINDS:
            raise refuse(name, f"unsupported member type {quote(kind)} (only files, directories, symlinks and hard links)")
        kind = REGULAR_KIND if kind in REGULAR else kind
        parts = member_components(name, kind == DIRECTORY)
        path = "/".join(parts)
        # Down the parents that exist: below the first one missing, nothing of the archive is.
        node: Optional[_Name] = self.root
        for i in range(len(parts) - 1):
            above: Optional[_Name] = node.children.get(parts[i]) if node is not None else None
            node = above
            if node is None:
                break
            if node.kind == SYMLINK:
                raise refuse(name, f"it would be written through the symlink {quote('/'.join(parts[: i + 1]))}")
            if node.kind is not None and node.kind != DIRECTORY:
                raise refuse(name, f"it would be written under the {_NAMES[node.kind]} {quote('/'.join(parts[: i + 1]))}")
        if not parts:
            before = self.root.kind
        else:
            last = node.children.get(parts[-1]) if node is not None else None
            before = last.kind if last is not None else None
        if before == SYMLINK:
            raise refuse(name, f"it would replace the symlink {quote(path)} of the same archive")
        if before is not None and not (before == DIRECTORY and kind == DIRECTORY):
            raise refuse(name, f"it would replace the {_NAMES[before]} of the same name earlier in the archive")
        if path == "" and kind != DIRECTORY:
            raise refuse(name, "only a directory can stand for the destination itself")
        if kind != REGULAR_KIND and size != 0:
            raise refuse(name, f"a {_NAMES[kind]} with {size} bytes of data")
        if kind in (REGULAR_KIND, DIRECTORY) and linkname != "":
            raise refuse(name, f"a link name on a {_NAMES[kind]}")
        link_bytes = _bytes(linkname)
        # symlink_escape walks a target component by component: a megabyte of `a/a/...` would cost minutes.
        if link_bytes > MAX_NAME_BYTES:
            raise refuse(name, f"a link name of {link_bytes} bytes, over the limit of {MAX_NAME_BYTES} (PATH_MAX)")
        if kind == SYMLINK:
            why = symlink_escape(path, linkname, self.links)
            if why:
                raise refuse(name, f"symlink: {why}")
            self.links[path] = linkname
        elif kind == HARDLINK:
            # A hard link to a symlink would copy its relative target to another place.
            try:
                target = self._find(member_components(linkname))
            except WarrenError:
                raise refuse(name, f"hard link to {quote(linkname)}, outside the destination or not a plain name") from None
            if target is None or target.kind not in (REGULAR_KIND, HARDLINK):
                raise refuse(name, f"hard link to {quote(linkname)}, which is not a regular file earlier in the archive")
        self._place(parts).kind = kind
        return path

    def end(self) -> None:
        for path, target in self.links.items():
            why = symlink_escape(path, target, self.links)
            if why:
                raise refuse(path, f"symlink: {why}")


def check_tree(root: str) -> Dict[str, str]:
    """Walks an extracted tree with lstat (never following a link): refuses anything but
    regular files, directories and symlinks, and any symlink leading outside `root` through
    the tree's own symlinks. The last word on a download, whatever the parsers read. Returns
    the tree's symlinks (path -> target) for the check of a merge (merge_check.py)."""
    links: Dict[str, str] = {}
    pending = [""]
    while pending:
        rel = pending.pop()
        for entry in sorted(os.listdir(os.path.join(root, rel))):
            path = f"{rel}/{entry}" if rel else entry
            mode = os.lstat(os.path.join(root, path)).st_mode
            if stat.S_ISDIR(mode):
                pending.append(path)
            elif stat.S_ISLNK(mode):
                links[path] = os.readlink(os.path.join(root, path))
            elif not stat.S_ISREG(mode):
                raise refuse(path, "extracted as something other than a file, directory or symlink")
    for path, target in links.items():
        why = symlink_escape(path, target, links)
        if why:
            raise refuse(path, f"symlink: {why}")
    return links
