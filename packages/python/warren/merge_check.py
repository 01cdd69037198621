"""The check of a download that merges into an existing destination, before anything is
moved into it, as the TS SDK's merge-check.ts: each archive is checked only against itself,
and what it merges into may already hold links (with `..` only at the start of targets, links
that each stay inside keep each other inside; what is left is a new link leading out through
one of the user's own). Every symlink of the new tree is resolved again against the merged view,
as the merge would leave it: a path of the new tree is the new tree's entry, any other the
destination's existing one. Both trees are read with lstat and readlink only, one directory
level at a time from the root, so no link on either side is ever followed. A new link whose
target goes out through one of the destination's own links is refused too (conservative);
the destination's links alone never fail a download. Standard library only."""

from __future__ import annotations

import os
import stat
from typing import Dict, Mapping, NamedTuple, Optional

from .tar_rules import refuse, symlink_escape


class _Entry(NamedTuple):
    new_dir: bool
    old_dir: bool
    link: Optional[str]


def _lstat_mode(path: str) -> Optional[int]:
    try:
        return os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None


class _MergedView:
    """The merged view of `tmp` over `dest`, by relative path; memoized, so each path costs
    at most one lstat per tree."""

    def __init__(self, tmp: str, dest: str, new_links: Mapping[str, str]) -> None:
        self.tmp, self.dest, self.new_links = tmp, dest, new_links
        self.entries: Dict[str, Optional[_Entry]] = {"": _Entry(True, True, None)}

    def get(self, rel: str, /) -> Optional[str]:
        entry = self._entry(rel)
        return entry.link if entry else None

    def _entry(self, rel: str) -> Optional[_Entry]:
        if rel in self.entries:
            return self.entries[rel]
        parent = self._entry(rel.rpartition("/")[0])
        # Only under a directory of a tree is that tree looked at: never through a link of either.
        fresh = _lstat_mode(os.path.join(self.tmp, rel)) if parent and parent.new_dir else None
        old = _lstat_mode(os.path.join(self.dest, rel)) if parent and parent.old_dir else None
        found: Optional[_Entry] = None
        if fresh is not None:
            is_dir = stat.S_ISDIR(fresh)
            found = _Entry(is_dir, is_dir and old is not None and stat.S_ISDIR(old), self.new_links.get(rel))
        elif old is not None:
            link = os.readlink(os.path.join(self.dest, rel)) if stat.S_ISLNK(old) else None
            found = _Entry(False, stat.S_ISDIR(old), link)
        self.entries[rel] = found
        return found


def check_merged_links(tmp: str, dest: str, links: Mapping[str, str]) -> None:
    """Refuses (InvalidArgumentError, naming the member) a symlink of the extracted `tmp`
    (its symlinks: `links`, from check_tree) that, merged into the existing `dest`, would be
    absolute or lead outside `dest`."""
    view = _MergedView(tmp, dest, links)
    for rel, target in links.items():
        why = symlink_escape(rel, target, view)
        if why:
            raise refuse(rel, f"symlink: {why}")
