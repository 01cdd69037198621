"""Per-call cost of the system calls a file-heavy command makes (syscalls suite).

Run the same way on the host and in a sandbox: builds a tree of DIRS x FILES small files
under the directory given, then times each kind of call over every file and prints one JSON
line of microseconds per call. Python's own overhead per call (about 1 us) is in both sides.

  getppid        no file system: the platform's round trip (systrap hand-off) alone
  lstat          lstat("dNN/eNN/fNNNN") relative to the cwd, as git status does per file;
                 nothing else holds the directories
  lstat-pinned   the same with every directory held open (O_PATH): under gVisor's overlay a
                 dentry nobody holds is dropped, so without this each lstat looks up its
                 directories again
  open-close     open + close of each file (two calls), as grep does around its read
"""
import json
import os
import sys
import time

DIRS = 40
FILES = 50  # 2,000 files in 40 directories, two levels deep


def build(root):
    for d in range(DIRS):
        sub = os.path.join(root, f"d{d // 8:02d}", f"e{d:02d}")
        os.makedirs(sub, exist_ok=True)
        for f in range(FILES):
            with open(os.path.join(sub, f"f{d * FILES + f:04d}.ts"), "w") as fh:
                fh.write("export const x = 1;\n")


def per_call(fn, items):
    t = time.perf_counter()
    for it in items:
        fn(it)
    return (time.perf_counter() - t) / len(items) * 1e6


def main():
    root = sys.argv[1]
    if not os.path.isdir(os.path.join(root, "d00")):
        build(root)
    os.chdir(root)
    files, dirs = [], []
    for d, _, fs in os.walk("."):
        dirs.append(d)
        files.extend(os.path.join(d, f)[2:] for f in fs)
    files.sort()
    out = {"getppid": per_call(lambda _: os.getppid(), files), "lstat": per_call(os.lstat, files)}

    def open_close(p):
        os.close(os.open(p, os.O_RDONLY))

    out["open-close"] = per_call(open_close, files)
    held = [os.open(d, os.O_PATH | os.O_DIRECTORY) for d in dirs]
    out["lstat-pinned"] = per_call(os.lstat, files)
    for fd in held:
        os.close(fd)
    print(json.dumps(out))


main()
