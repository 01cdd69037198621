/*
 * warren-init: the sandbox's first process. It gives loopback its second address, starts the
 * guest agent and then every command the agent asks for, and reaps orphans as an init must.
 *
 * Why a separate native process: under gVisor, fork() copies the caller's whole address
 * space through the Sentry. From the agent (node, ~100 MB) a spawn costs 70 to 100 ms; from
 * a small process with vfork about 25 ms (bench/README.md, "Spawn cost inside gVisor").
 *
 *   warren-init AGENT_ARGV...
 *
 * The agent runs with the sandbox's stdio (its channel to the daemon) and gets fd 3, a unix
 * socket to this process, which carries:
 *   requests = u32 little-endian length, then NUL-terminated fields:
 *              "spawn" ID UID GID NPROC CWD ARGC ARGV[0..ARGC) ENV...
 *              "release" ID
 *              "hostname" ID NAME      (a restored image keeps the hostname it was baked with)
 *              "killtree" ID PID SIGNAL   signal every process the command PID started, wherever
 *                                         it went (setsid, double fork): its cgroup's members
 *   replies  = one text line each:
 *              "spawned ID PID STDIN_FD STDOUT_FD STDERR_FD"  the agent opens these fds of
 *                  this process through /proc/1/fd, then sends "release ID" so they close here
 *              "failed ID ERRNO"                              no process was started
 *              "done ID ERRNO"                                the answer to hostname and killtree;
 *                                                              0 is success
 *              "exit PID CODE SIGNAL"                         CODE is -1 when killed by SIGNAL;
 *                  also sent for reaped orphans, which the agent does not know and ignores
 * When the agent exits, so does this process, with the agent's status: the sandbox ends.
 *
 * Each command runs in a cgroup of its own (the Sentry's pids hierarchy, mounted at
 * CGROUP_ROOT; a child joins it before execve). A process cannot leave it without root, so
 * "every process this command started" is the cgroup's member list, even after setsid or a
 * double fork reparented them to init. A cgroup is removed once its command has exited and
 * it is empty. Without the mount (it failed at start) commands run without one, and a kill
 * reaches only the command's process group.
 *
 * A command's child makes only system calls between vfork and execve: it shares this
 * process's memory until then. Setup or exec failures are reported the way a shell reports
 * them: a message on the command's stderr and exit status 127 (not found) or 126 (found but
 * not executable).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <linux/capability.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REQUEST (8u << 20)
#define MAX_HELD 4096
#define MAX_GROUPS 4096
#define CGROUP_ROOT "/run/warren/cgroup"
/* Rounds of "list the members, kill them" before killtree gives up on a cgroup. */
#define KILL_ROUNDS 1000

struct held {
  unsigned long id;
  int fds[3];
};

/* A command's cgroup, named after its spawn id; exited once the command itself was reaped. */
struct group {
  unsigned long id;
  pid_t pid;
  int exited;
};

static struct held held[MAX_HELD];
static int held_count;
static struct group groups[MAX_GROUPS];
static int group_count;
static int cgroups_ok;
static int ctl = -1;
static pid_t agent_pid;

static void die(const char *what) {
  fprintf(stderr, "warren-init: %s: %s\n", what, strerror(errno));
  exit(70);
}

static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reply(const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  for (int off = 0; off < n;) {
    ssize_t w = write(ctl, line + off, (size_t)(n - off));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return; /* the agent is gone; its exit ends this process */
    off += (int)w;
  }
}

/* Writes "warren: NAME: REASON\n" to fd 2 without touching shared memory, then exits. */
static void child_fail(const char *name, const char *reason, int status) {
  struct iovec parts[] = {
      {(void *)"warren: ", 8}, {(void *)name, strlen(name)}, {(void *)": ", 2}, {(void *)reason, strlen(reason)}, {(void *)"\n", 1}};
  (void)!syscall(SYS_writev, 2, parts, 5);
  _exit(status);
}

static const char *env_lookup(char **env, const char *name) {
  size_t len = strlen(name);
  for (; *env; env++)
    if (strncmp(*env, name, len) == 0 && (*env)[len] == '=') return *env + len + 1;
  return NULL;
}

/* execve, falling back to /bin/sh for a script without a #! line, as execvp does. */
static void exec_file(const char *file, char **argv, char **env) {
  execve(file, argv, env);
  if (errno == ENOEXEC) {
    int argc = 0;
    while (argv[argc]) argc++;
    char *shargv[argc + 2];
    shargv[0] = (char *)"sh";
    shargv[1] = (char *)file;
    for (int i = 1; i <= argc; i++) shargv[i + 1] = argv[i];
    execve("/bin/sh", shargv, env);
    errno = ENOEXEC;
  }
}

/*
 * In a child before execve. This process holds CAP_SYS_ADMIN only to set the hostname and
 * CAP_NET_ADMIN only to give loopback its second address at start; no child gets either
 * (root inside stays without them, as in the bundle's capability set).
 */
static long drop_admin(void) {
  if (syscall(SYS_prctl, PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) < 0) return -1;
  return syscall(SYS_prctl, PR_CAPBSET_DROP, CAP_NET_ADMIN, 0, 0, 0);
}

/*
 * Gives loopback 127.0.1.1/8, the address the agent's /etc/hosts gives the sandbox's
 * hostname. glibc's getaddrinfo with AI_ADDRCONFIG counts only an IPv4 address other than
 * 127.0.0.1 as "IPv4 configured", and a sandbox's stack (loopback only) had none, so
 * IPv4-only lookups (curl -4, getent ahostsv4, AF_INET with AI_ADDRCONFIG) failed even for
 * localhost. Best effort: on failure those lookups just keep failing, so it only warns.
 */
static void add_loopback_address(void) {
  struct {
    struct nlmsghdr nh;
    struct ifaddrmsg ifa;
    struct rtattr local_rta;
    struct in_addr local;
    struct rtattr address_rta;
    struct in_addr address;
  } req;
  memset(&req, 0, sizeof req);
  req.nh.nlmsg_len = sizeof req;
  req.nh.nlmsg_type = RTM_NEWADDR;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
  req.nh.nlmsg_seq = 1;
  req.ifa.ifa_family = AF_INET;
  req.ifa.ifa_prefixlen = 8;
  req.ifa.ifa_scope = RT_SCOPE_HOST;
  req.ifa.ifa_index = if_nametoindex("lo");
  if (!req.ifa.ifa_index) req.ifa.ifa_index = 1;
  req.local_rta.rta_type = IFA_LOCAL;
  req.local_rta.rta_len = RTA_LENGTH(sizeof(struct in_addr));
  req.address_rta.rta_type = IFA_ADDRESS;
  req.address_rta.rta_len = RTA_LENGTH(sizeof(struct in_addr));
  inet_pton(AF_INET, "127.0.1.1", &req.local);
  req.address = req.local;

  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) {
    fprintf(stderr, "warren-init: no netlink socket for the loopback address: %s\n", strerror(errno));
    return;
  }
  int err = 0;
  char ack[512];
  if (send(fd, &req, sizeof req, 0) < 0) {
    err = errno;
  } else {
    ssize_t n = recv(fd, ack, sizeof ack, 0);
    struct nlmsghdr *h = (struct nlmsghdr *)ack;
    if (n < 0) err = errno;
    else if (n >= (ssize_t)(sizeof *h + sizeof(struct nlmsgerr)) && h->nlmsg_type == NLMSG_ERROR)
      err = -((struct nlmsgerr *)NLMSG_DATA(h))->error;
  }
  if (err && err != EEXIST) fprintf(stderr, "warren-init: cannot add 127.0.1.1 to loopback: %s\n", strerror(err));
  close(fd);
}

/* Mounts the Sentry's pids hierarchy where commands' cgroups live. Best effort, with a warning. */
static void mount_cgroups(void) {
  mkdir("/run", 0755);
  mkdir("/run/warren", 0755);
  mkdir(CGROUP_ROOT, 0755);
  if (mount("none", CGROUP_ROOT, "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, "pids") < 0) {
    fprintf(stderr, "warren-init: cannot mount the pids cgroup at %s (a killed command's background processes may outlive it): %s\n", CGROUP_ROOT, strerror(errno));
    return;
  }
  cgroups_ok = 1;
}

static void group_path(char *buf, size_t len, unsigned long id, const char *file) {
  snprintf(buf, len, "%s/%lu%s%s", CGROUP_ROOT, id, file ? "/" : "", file ? file : "");
}

/* Makes the cgroup of spawn id and opens its member list for the child to join; -1 on error. */
static int open_group(unsigned long id) {
  if (group_count >= MAX_GROUPS) {
    errno = EAGAIN;
    return -1;
  }
  char path[PATH_MAX];
  group_path(path, sizeof path, id, NULL);
  if (mkdir(path, 0755) < 0 && errno != EEXIST) return -1;
  group_path(path, sizeof path, id, "cgroup.procs");
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    group_path(path, sizeof path, id, NULL);
    rmdir(path);
    errno = e;
  }
  return fd;
}

/* Removes the cgroups of exited commands that no process is left in (EBUSY: try again later). */
static void prune_groups(void) {
  char path[PATH_MAX];
  for (int i = 0; i < group_count;) {
    if (!groups[i].exited) {
      i++;
      continue;
    }
    group_path(path, sizeof path, groups[i].id, NULL);
    if (rmdir(path) == 0 || errno == ENOENT) groups[i] = groups[--group_count];
    else i++;
  }
}

/* Writes n in decimal to buf (at least 21 bytes); returns the length. Async-signal-safe. */
static size_t format_ulong(char *buf, unsigned long n) {
  char tmp[21];
  size_t len = 0;
  do tmp[len++] = (char)('0' + n % 10);
  while ((n /= 10) && len < sizeof tmp);
  for (size_t i = 0; i < len; i++) buf[i] = tmp[len - 1 - i];
  return len;
}

/* In a child before execve: this process ignores SIGPIPE, and ignored signals survive exec. */
static void reset_signals(void) {
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  sigaction(SIGPIPE, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Runs in the vfork child. Never returns. */
static void child(char **argv, char **env, const char *cwd, unsigned uid, unsigned gid, unsigned long nproc, int in_fd, int out_fd, int err_fd, int group_fd) {
  if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(127);
  /* Before anything it runs can fork, and while still root (the member list is root's). */
  if (group_fd >= 0) {
    char pid[21];
    size_t len = format_ulong(pid, (unsigned long)syscall(SYS_getpid));
    if (syscall(SYS_write, group_fd, pid, len) < 0) child_fail(argv[0], "cannot join the command's cgroup", 126);
  }
  /* Its own session, so a timeout or signal reaches the whole tree with kill(-pid). */
  if (syscall(SYS_setsid) < 0) child_fail(argv[0], "setsid failed", 127);
  /* While still root: dropping from the bounding set needs CAP_SETPCAP. */
  if (drop_admin() < 0) child_fail(argv[0], "cannot drop CAP_SYS_ADMIN and CAP_NET_ADMIN", 126);
  if (nproc) {
    struct rlimit lim = {nproc, nproc};
    if (syscall(SYS_setrlimit, RLIMIT_NPROC, &lim) < 0) child_fail(argv[0], strerror(errno), 127);
  }
  if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0 || syscall(SYS_setresuid, uid, uid, uid) < 0)
    child_fail(argv[0], strerror(errno), 127);
  if (syscall(SYS_chdir, cwd) < 0) child_fail(cwd, strerror(errno), 127);
  reset_signals();

  const char *name = argv[0];
  if (strchr(name, '/')) {
    exec_file(name, argv, env);
    child_fail(name, strerror(errno), errno == ENOENT || errno == ENOTDIR ? 127 : 126);
  }
  /* PATH comes from the command's environment, not the helper's (execvpe would use ours). */
  const char *path = env_lookup(env, "PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  int denied = 0;
  char candidate[PATH_MAX];
  for (const char *dir = path;;) {
    const char *end = strchrnul(dir, ':');
    size_t dlen = (size_t)(end - dir);
    if (dlen == 0) dir = ".", dlen = 1;
    if (dlen + 1 + strlen(name) + 1 <= sizeof candidate) {
      memcpy(candidate, dir, dlen);
      candidate[dlen] = '/';
      strcpy(candidate + dlen + 1, name);
      exec_file(candidate, argv, env);
      if (errno == EACCES) denied = 1;
      else if (errno != ENOENT && errno != ENOTDIR) child_fail(name, strerror(errno), 126);
    }
    if (!*end) break;
    dir = end + 1;
  }
  if (denied) child_fail(name, strerror(EACCES), 126);
  child_fail(name, "not found", 127);
}

static void close_all(int *fds, int n) {
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
}

static void do_spawn(char **fields, int nfields) {
  /* id uid gid nproc cwd argc argv... env... */
  if (nfields < 7) {
    reply("failed %s %d\n", nfields > 0 ? fields[0] : "0", EINVAL);
    return;
  }
  unsigned long id = strtoul(fields[0], NULL, 10);
  unsigned uid = (unsigned)strtoul(fields[1], NULL, 10);
  unsigned gid = (unsigned)strtoul(fields[2], NULL, 10);
  unsigned long nproc = strtoul(fields[3], NULL, 10);
  const char *cwd = fields[4];
  int argc = atoi(fields[5]);
  if (argc < 1 || 6 + argc > nfields || held_count >= MAX_HELD) {
    reply("failed %lu %d\n", id, argc < 1 ? EINVAL : EAGAIN);
    return;
  }
  int envc = nfields - 6 - argc;
  char *argv[argc + 1], *env[envc + 1];
  memcpy(argv, fields + 6, sizeof(char *) * (size_t)argc);
  argv[argc] = NULL;
  memcpy(env, fields + 6 + argc, sizeof(char *) * (size_t)envc);
  env[envc] = NULL;

  int group_fd = -1;
  if (cgroups_ok && (group_fd = open_group(id)) < 0) {
    reply("failed %lu %d\n", id, errno);
    return;
  }
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
    int e = errno;
    close_all(in, 2), close_all(out, 2), close_all(err, 2);
    if (group_fd >= 0) close(group_fd), groups[group_count++] = (struct group){id, 0, 1};
    reply("failed %lu %d\n", id, e);
    return;
  }
  /* Room for 1 MiB of output per stream: a reader that drains in batches (the agent tools'
     tail) then wakes a few hundred times for 50 MB instead of once per 4 KiB write. Best
     effort: the default size works, only slower. */
  (void)fcntl(out[0], F_SETPIPE_SZ, 1 << 20);
  (void)fcntl(err[0], F_SETPIPE_SZ, 1 << 20);
  pid_t pid = vfork();
  if (pid == 0) child(argv, env, cwd, uid, gid, nproc, in[0], out[1], err[1], group_fd);
  int e = errno;
  close(in[0]), close(out[1]), close(err[1]);
  if (group_fd >= 0) {
    close(group_fd);
    /* A failed vfork leaves an empty cgroup: marked exited, the next prune removes it. */
    groups[group_count++] = (struct group){id, pid, pid < 0};
  }
  if (pid < 0) {
    close(in[1]), close(out[0]), close(err[0]);
    reply("failed %lu %d\n", id, e);
    return;
  }
  held[held_count++] = (struct held){id, {in[1], out[0], err[0]}};
  reply("spawned %lu %d %d %d %d\n", id, (int)pid, in[1], out[0], err[0]);
}

static void do_release(char **fields, int nfields) {
  if (nfields < 1) return;
  unsigned long id = strtoul(fields[0], NULL, 10);
  for (int i = 0; i < held_count; i++) {
    if (held[i].id != id) continue;
    close_all(held[i].fds, 3);
    held[i] = held[--held_count];
    return;
  }
}

static void reap(void);

/*
 * Signals every member of the cgroup of the command PID. For SIGKILL it first forbids new
 * processes in the cgroup (pids.max 0, so a fork bomb cannot outrun it) and repeats until
 * the cgroup is empty; killed members are reaped on the way when they are this process's.
 */
static int kill_group(pid_t pid, int sig) {
  struct group *g = NULL;
  /*
   * The running command's group first; else the latest one of a command with that pid that
   * exited just before the request came (what it started may still run in there).
   */
  for (int i = 0; i < group_count; i++)
    if (groups[i].pid == pid && (!g || g->exited || !groups[i].exited)) g = &groups[i];
  if (!g) return kill(-pid, sig) < 0 && kill(pid, sig) < 0 ? errno : 0;
  char path[PATH_MAX];
  if (sig == SIGKILL) {
    group_path(path, sizeof path, g->id, "pids.max");
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) (void)!write(fd, "0", 1), close(fd);
  }
  unsigned long id = g->id;
  group_path(path, sizeof path, id, "cgroup.procs");
  for (int round = 0; round < KILL_ROUNDS; round++) {
    FILE *f = fopen(path, "re");
    if (!f) return errno == ENOENT ? 0 : errno;
    int members = 0;
    long member;
    while (fscanf(f, "%ld", &member) == 1) {
      members++;
      kill((pid_t)member, sig);
    }
    fclose(f);
    if (!members || sig != SIGKILL) return 0;
    reap();
    usleep(1000);
  }
  return EBUSY;
}

static void do_killtree(char **fields, int nfields) {
  if (nfields < 3) return;
  int rc = kill_group((pid_t)atoi(fields[1]), atoi(fields[2]));
  reply("done %s %d\n", fields[0], rc);
}

static void do_hostname(char **fields, int nfields) {
  if (nfields < 2) return;
  int rc = sethostname(fields[1], strlen(fields[1]));
  reply("done %s %d\n", fields[0], rc < 0 ? errno : 0);
}

static void handle_request(char *buf, uint32_t len) {
  int nfields = 0;
  for (uint32_t i = 0; i < len; i++)
    if (buf[i] == '\0') nfields++;
  if (nfields == 0 || buf[len - 1] != '\0') return;
  char **fields = malloc(sizeof(char *) * (size_t)nfields);
  if (!fields) die("malloc");
  char *p = buf;
  for (int i = 0; i < nfields; i++) {
    fields[i] = p;
    p += strlen(p) + 1;
  }
  if (strcmp(fields[0], "spawn") == 0) do_spawn(fields + 1, nfields - 1);
  else if (strcmp(fields[0], "release") == 0) do_release(fields + 1, nfields - 1);
  else if (strcmp(fields[0], "hostname") == 0) do_hostname(fields + 1, nfields - 1);
  else if (strcmp(fields[0], "killtree") == 0) do_killtree(fields + 1, nfields - 1);
  free(fields);
}

static void reap(void) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    if (pid == agent_pid) exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    for (int i = 0; i < group_count; i++)
      if (groups[i].pid == pid) groups[i].exited = 1;
    if (WIFEXITED(status)) reply("exit %d %d 0\n", (int)pid, WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) reply("exit %d -1 %d\n", (int)pid, WTERMSIG(status));
  }
  prune_groups();
}

/* The agent keeps the sandbox's stdio and gets its end of the control socket as fd 3. */
static void start_agent(char **argv, int agent_end) {
  extern char **environ;
  pid_t pid = vfork();
  if (pid == 0) {
    if (dup2(agent_end, 3) < 0) _exit(127);
    reset_signals();
    if (drop_admin() < 0) child_fail(argv[0], "cannot drop CAP_SYS_ADMIN and CAP_NET_ADMIN", 127);
    execve(argv[0], argv, environ);
    child_fail(argv[0], strerror(errno), 127);
  }
  if (pid < 0) die("starting the agent");
  agent_pid = pid;
  close(agent_end);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: warren-init AGENT_ARGV...\n");
    return 64;
  }
  /* Losing the daemon's end of stdio must never kill the sandbox's init. */
  signal(SIGPIPE, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0) die("sigprocmask");
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die("signalfd");
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0) die("socketpair");
  ctl = pair[0];
  add_loopback_address();
  mount_cgroups();
  start_agent(argv + 1, pair[1]);

  size_t cap = 64 * 1024, have = 0;
  char *buf = malloc(cap);
  if (!buf) die("malloc");
  struct pollfd fds[2] = {{ctl, POLLIN, 0}, {sfd, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (fds[1].revents) {
      struct signalfd_siginfo info;
      while (read(sfd, &info, sizeof info) == sizeof info) {
      }
      reap();
    }
    if (!fds[0].revents) continue;
    if (have == cap) {
      cap *= 2;
      if (!(buf = realloc(buf, cap))) die("realloc");
    }
    ssize_t n = read(ctl, buf + have, cap - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      /* The agent closed its end: nothing more to serve, but it still has to be reaped. */
      fds[0].fd = -1;
      continue;
    }
    have += (size_t)n;
    size_t at = 0;
    while (have - at >= 4) {
      uint32_t len;
      memcpy(&len, buf + at, 4);
      if (len > MAX_REQUEST) {
        fprintf(stderr, "warren-init: request of %u bytes is too large\n", len);
        exit(65);
      }
      if (have - at - 4 < len) break;
      if (len > 0) handle_request(buf + at + 4, len);
      at += 4 + len;
    }
    memmove(buf, buf + at, have - at);
    have -= at;
  }
}
