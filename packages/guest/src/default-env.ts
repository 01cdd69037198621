/**
 * Environment every command in a sandbox starts with unless the sandbox's or the command's
 * own environment sets the same name (docs/performance.md has the measurements).
 *
 * GLIBC_TUNABLES: under gVisor's systrap platform every munmap (and the page faults of a fresh
 * mapping) costs tens of microseconds, against well under one on a host kernel. glibc serves
 * allocations of 128 KiB and more with a fresh mmap and returns them with munmap, and coreutils
 * and git allocate such a buffer per file: `find | xargs cat` of 3,000 files took 47% less
 * time and `git add` of 5,000 files 27% less with these values. They keep allocations up to
 * 4 MiB in the heap (mmap_threshold), keep up to 64 MiB of freed heap before giving it back
 * (trim_threshold) and grow the heap 16 MiB at a time (top_pad; pages never touched cost
 * nothing). Safe for every program: only glibc's loader reads the variable, once at start
 * (static, musl and Go binaries ignore it); all three values are inside glibc's documented
 * ranges and change where memory comes from, never what a program sees; setuid programs
 * ignore malloc tunables; and root inside a sandbox is no boundary to protect. The cost is
 * memory a process keeps after a peak (up to 64 MiB per malloc arena), counted against the
 * sandbox's memory limit. `GLIBC_TUNABLES=` (empty) in a sandbox's or command's env opts out.
 */
const DEFAULT_GLIBC_TUNABLES = 'glibc.malloc.mmap_threshold=4194304:glibc.malloc.trim_threshold=67108864:glibc.malloc.top_pad=16777216';

export const DEFAULT_COMMAND_ENV: Readonly<Record<string, string>> = {
  GLIBC_TUNABLES: DEFAULT_GLIBC_TUNABLES,
};
