/*
 * Per-spawn cost of /bin/true from a small native process: what a native spawner (an addon
 * in the agent, or a helper next to it) would cost. Built static on the host by the bench
 * (gcc -O2 -static) and copied into the sandbox.
 *
 * Usage: spawn-c N WARMUP UID GID NPROC
 * Prints {"results":{method:[ms,...]}} on stdout. Methods run round-robin.
 *
 * The "agent features" variant does in the child everything the agent needs per command:
 * own session (setsid), no supplementary groups, gid and uid, RLIMIT_NPROC, cwd, its own
 * stdin/stdout/stderr pipes, an explicit environment. The child only makes raw system calls,
 * which is what makes vfork (shared address space, no copy) safe, as in glibc's posix_spawn.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char *const ARGV[] = {"/bin/true", NULL};
static char *const ENVP[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp", "LANG=C.UTF-8", NULL};
static unsigned UID, GID;
static unsigned long NPROC;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void wait_ok(pid_t pid) {
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "child failed: status %d\n", st);
    exit(1);
  }
}

static void drain_close(int fd) {
  char buf[256];
  while (read(fd, buf, sizeof buf) > 0) {
  }
  close(fd);
}

static int m_vfork_plain(void) {
  pid_t pid = vfork();
  if (pid == 0) {
    execve(ARGV[0], ARGV, ENVP);
    _exit(127);
  }
  if (pid < 0) return -1;
  wait_ok(pid);
  return 0;
}

static int m_fork_plain(void) {
  pid_t pid = fork();
  if (pid == 0) {
    execve(ARGV[0], ARGV, ENVP);
    _exit(127);
  }
  if (pid < 0) return -1;
  wait_ok(pid);
  return 0;
}

static int m_posix_spawn(void) {
  pid_t pid;
  if (posix_spawn(&pid, ARGV[0], NULL, NULL, ARGV, ENVP) != 0) return -1;
  wait_ok(pid);
  return 0;
}

/* Child side, shared by the vfork and fork variants: raw system calls only. */
static void child_setup_exec(int in_r, int out_w, int err_w, int in_w, int out_r, int err_r) {
  struct rlimit rl = {NPROC, NPROC};
  syscall(SYS_close, in_w);
  syscall(SYS_close, out_r);
  syscall(SYS_close, err_r);
  if (syscall(SYS_dup2, in_r, 0) < 0 || syscall(SYS_dup2, out_w, 1) < 0 || syscall(SYS_dup2, err_w, 2) < 0) syscall(SYS_exit, 126);
  syscall(SYS_close, in_r);
  syscall(SYS_close, out_w);
  syscall(SYS_close, err_w);
  if (syscall(SYS_setsid) < 0) syscall(SYS_exit, 126);
  if (syscall(SYS_chdir, "/tmp") < 0) syscall(SYS_exit, 126);
  if (syscall(SYS_setrlimit, RLIMIT_NPROC, &rl) < 0) syscall(SYS_exit, 126);
  if (syscall(SYS_setgroups, 0, NULL) < 0 && geteuid() == 0) syscall(SYS_exit, 126);
  if (syscall(SYS_setresgid, GID, GID, GID) < 0) syscall(SYS_exit, 126);
  if (syscall(SYS_setresuid, UID, UID, UID) < 0) syscall(SYS_exit, 126);
  syscall(SYS_execve, ARGV[0], ARGV, ENVP);
  syscall(SYS_exit, 127);
}

static int agent_like(int use_vfork) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) return -1;
  pid_t pid = use_vfork ? vfork() : fork();
  if (pid == 0) child_setup_exec(in[0], out[1], err[1], in[1], out[0], err[0]);
  if (pid < 0) return -1;
  close(in[0]);
  close(out[1]);
  close(err[1]);
  close(in[1]); /* no stdin for /bin/true */
  drain_close(out[0]);
  drain_close(err[0]);
  wait_ok(pid);
  return 0;
}

static int m_vfork_agent(void) { return agent_like(1); }
static int m_fork_agent(void) { return agent_like(0); }

struct method {
  const char *name;
  int (*fn)(void);
};

static const struct method METHODS[] = {
    {"C vfork+exec /bin/true", m_vfork_plain},
    {"C posix_spawn /bin/true", m_posix_spawn},
    {"C fork+exec /bin/true", m_fork_plain},
    {"C vfork + agent features (setsid, uid/gid, NPROC, cwd, 3 pipes)", m_vfork_agent},
    {"C fork + agent features (setsid, uid/gid, NPROC, cwd, 3 pipes)", m_fork_agent},
};
#define NM (sizeof METHODS / sizeof METHODS[0])

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100;
  int warmup = argc > 2 ? atoi(argv[2]) : 5;
  UID = argc > 3 ? (unsigned)atoi(argv[3]) : 65534;
  GID = argc > 4 ? (unsigned)atoi(argv[4]) : 65534;
  NPROC = argc > 5 ? strtoul(argv[5], NULL, 10) : 1024;
  double *t = calloc((size_t)n * NM, sizeof *t);
  for (int i = 0; i < warmup + n; i++) {
    for (size_t m = 0; m < NM; m++) {
      double s = now_ms();
      if (METHODS[m].fn() != 0) {
        fprintf(stderr, "%s: %s\n", METHODS[m].name, strerror(errno));
        return 1;
      }
      if (i >= warmup) t[m * n + (i - warmup)] = now_ms() - s;
    }
  }
  printf("{\"results\":{");
  for (size_t m = 0; m < NM; m++) {
    printf("%s\"%s\":[", m ? "," : "", METHODS[m].name);
    for (int i = 0; i < n; i++) printf("%s%.4f", i ? "," : "", t[m * n + i]);
    printf("]");
  }
  printf("}}\n");
  return 0;
}
