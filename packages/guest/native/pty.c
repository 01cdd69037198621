/*
 * warren-pty: runs one command on a new pseudo-terminal inside a sandbox, for the agent's
 * terminals (packages/guest/src/terminals.ts). Node has no PTY API and the agent must not
 * need a native addon, so this small static helper does the terminal calls and relays bytes.
 *
 *   warren-pty COLS ROWS PROGRAM [ARGS...]
 *
 * warren-init starts it like any command: already as the requested user, in the requested
 * cwd, with the command's environment and RLIMIT_NPROC, stdin/stdout/stderr being pipes to
 * the agent. The helper opens /dev/ptmx, forks the command into a new session whose
 * controlling terminal is the slave, and relays:
 *
 *   stdout: every byte the command writes to the terminal (raw, not UTF-8 checked).
 *   stdin:  records  u8 kind, u32 length (big endian), payload:
 *             'd' bytes for the terminal (keystrokes: 0x03 is Ctrl-C when ISIG is on)
 *             'r' u16 cols, u16 rows: TIOCSWINSZ (the kernel then sends SIGWINCH)
 *             's' u8 signal number: sent to the terminal's foreground process group
 *           One pipe carries both, so resizes stay in order with the keystrokes around them.
 *   stderr: the helper's own errors, one line each.
 *
 * It exits with the command's status (128+N when killed by signal N), once the command has
 * exited and its output is drained. EOF on stdin (the agent went away or closed the terminal)
 * hangs the terminal up: the session gets SIGHUP, as when an ssh connection drops.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

/* A record longer than this is a protocol error (the agent sends keystrokes in small pieces). */
#define MAX_RECORD (1 << 20)
#define IO_CHUNK 65536

static int sigchld_pipe[2] = {-1, -1};
/* The command: session leader and, unless it made others, its own process group. */
static pid_t child_pid = -1;

static void on_sigchld(int sig) {
  (void)sig;
  int saved = errno;
  /* Nonblocking: a full pipe already says "a child changed state". */
  if (write(sigchld_pipe[1], "c", 1) < 0) { /* nothing to do in a handler */ }
  errno = saved;
}

static void die(const char *what) {
  fprintf(stderr, "warren-pty: %s: %s\n", what, strerror(errno));
  exit(127);
}

static int parse_dim(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 1 || v > 65535) {
    fprintf(stderr, "warren-pty: bad size '%s'\n", s);
    exit(127);
  }
  return (int)v;
}

/* In the child: the new session, the slave as controlling terminal and stdio, then exec. */
static void start_child(const char *slave_name, int master, char **argv) {
  if (setsid() < 0) die("setsid");
  int slave = open(slave_name, O_RDWR);
  if (slave < 0) die("open slave");
  if (ioctl(slave, TIOCSCTTY, 0) < 0) die("TIOCSCTTY");
  if (dup2(slave, 0) < 0 || dup2(slave, 1) < 0 || dup2(slave, 2) < 0) die("dup2");
  if (slave > 2) close(slave);
  close(master);
  /* The helper ignores SIGPIPE and blocks nothing else, but an ignored signal stays ignored
   * across exec: give the command the default dispositions a login shell expects. */
  for (int s = 1; s < NSIG; s++) {
    if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execvp(argv[0], argv);
  /* The user sees this on the terminal; 127 as a shell reports "command not found". */
  fprintf(stderr, "warren-pty: cannot run %s: %s\r\n", argv[0], strerror(errno));
  _exit(127);
}

/* Writes all of buf to a blocking fd; false when the reader is gone. */
static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return 0;
    }
    buf += n;
    len -= (size_t)n;
  }
  return 1;
}

struct input {
  /* Bytes read from stdin, not yet parsed into records. */
  char *buf;
  size_t len;
  /* Keystrokes waiting for the terminal to take them (the master is nonblocking). */
  char *pending;
  size_t pending_len;
};

static uint32_t be32(const unsigned char *p) { return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]; }

static void queue_input(struct input *in, const void *data, size_t len) {
  in->pending = realloc(in->pending, in->pending_len + len);
  if (!in->pending && len) die("realloc");
  memcpy(in->pending + in->pending_len, data, len);
  in->pending_len += len;
}

/*
 * A signal for the terminal's foreground process group. gVisor answers TIOCGPGRP on the
 * master only to a process whose controlling terminal it is, which this helper is not; so
 * SIGINT, SIGQUIT and SIGTSTP go as their keys (the line discipline signals the foreground
 * group, as Linux does for a typed Ctrl-C), and the rest to the group tcgetpgrp names where
 * it works, else to the command's own group.
 */
static void send_signal(int master, struct input *in, int sig) {
  struct termios t;
  int key = -1;
  if (tcgetattr(master, &t) == 0 && (t.c_lflag & ISIG)) {
    if (sig == SIGINT) key = t.c_cc[VINTR];
    else if (sig == SIGQUIT) key = t.c_cc[VQUIT];
    else if (sig == SIGTSTP) key = t.c_cc[VSUSP];
  }
  if (key > 0 && key != _POSIX_VDISABLE) {
    char c = (char)key;
    queue_input(in, &c, 1);
    return;
  }
  pid_t pgrp = tcgetpgrp(master);
  if (pgrp <= 0) pgrp = child_pid;
  if (kill(-pgrp, sig) < 0) fprintf(stderr, "warren-pty: signal %d to group %d: %s\n", sig, pgrp, strerror(errno));
}

static void handle_record(int master, struct input *in, char kind, const unsigned char *payload, uint32_t len) {
  if (kind == 'd') {
    queue_input(in, payload, len);
  } else if (kind == 'r' && len == 4) {
    struct winsize ws = {0};
    ws.ws_col = (unsigned short)((payload[0] << 8) | payload[1]);
    ws.ws_row = (unsigned short)((payload[2] << 8) | payload[3]);
    if (ioctl(master, TIOCSWINSZ, &ws) < 0) fprintf(stderr, "warren-pty: TIOCSWINSZ: %s\n", strerror(errno));
  } else if (kind == 's' && len == 1) {
    send_signal(master, in, payload[0]);
  } else {
    fprintf(stderr, "warren-pty: unknown record '%c' of %u bytes\n", kind, len);
  }
}

/* Parses the whole records in in->buf; keeps a partial one for the next read. */
static void parse_input(int master, struct input *in) {
  size_t at = 0;
  while (in->len - at >= 5) {
    uint32_t len = be32((const unsigned char *)in->buf + at + 1);
    if (len > MAX_RECORD) {
      fprintf(stderr, "warren-pty: record of %u bytes is too long\n", len);
      exit(127);
    }
    if (in->len - at - 5 < len) break;
    handle_record(master, in, in->buf[at], (const unsigned char *)in->buf + at + 5, len);
    at += 5 + len;
  }
  memmove(in->buf, in->buf + at, in->len - at);
  in->len -= at;
}

/* Copies what the terminal has now to stdout; false once the slave side is gone (EIO). */
static int drain_master(int master, int *stdout_ok) {
  char buf[IO_CHUNK];
  for (;;) {
    ssize_t n = read(master, buf, sizeof buf);
    if (n > 0) {
      if (*stdout_ok && !write_all(1, buf, (size_t)n)) *stdout_ok = 0;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return 1;
    return 0; /* EIO: no process holds the slave any more; 0: likewise */
  }
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: warren-pty COLS ROWS PROGRAM [ARGS...]\n");
    return 127;
  }
  struct winsize ws = {0};
  ws.ws_col = (unsigned short)parse_dim(argv[1]);
  ws.ws_row = (unsigned short)parse_dim(argv[2]);

  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) die("open /dev/ptmx");
  if (grantpt(master) < 0) die("grantpt");
  if (unlockpt(master) < 0) die("unlockpt");
  char *slave_name = ptsname(master);
  if (!slave_name) die("ptsname");
  slave_name = strdup(slave_name);
  if (ioctl(master, TIOCSWINSZ, &ws) < 0) die("TIOCSWINSZ");

  if (pipe2(sigchld_pipe, O_CLOEXEC | O_NONBLOCK) < 0) die("pipe");
  struct sigaction sa = {0};
  sa.sa_handler = on_sigchld;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGCHLD, &sa, NULL) < 0) die("sigaction");
  signal(SIGPIPE, SIG_IGN);

  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) start_child(slave_name, master, argv + 3);
  child_pid = child;

  if (fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK) < 0) die("fcntl");
  struct input in = {0};
  in.buf = malloc(IO_CHUNK + 5);
  size_t cap = IO_CHUNK + 5;
  if (!in.buf) die("malloc");
  int stdin_open = 1;
  int stdout_ok = 1;
  int status = 0;
  int exited = 0;

  while (!exited) {
    struct pollfd fds[3] = {
      /* Stop reading input while the terminal has not taken the last keystrokes: the pipe
       * then fills and the agent's writes wait, instead of this process's memory growing. */
      {.fd = stdin_open && in.pending_len == 0 ? 0 : -1, .events = POLLIN},
      {.fd = master, .events = POLLIN | (in.pending_len ? POLLOUT : 0)},
      {.fd = sigchld_pipe[0], .events = POLLIN},
    };
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (fds[2].revents & POLLIN) {
      char tmp[64];
      while (read(sigchld_pipe[0], tmp, sizeof tmp) > 0) {
      }
      pid_t r;
      while ((r = waitpid(-1, &status, WNOHANG)) > 0) {
        if (r == child) exited = 1;
      }
      if (exited) break;
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) drain_master(master, &stdout_ok);
    if ((fds[1].revents & POLLOUT) && in.pending_len) {
      ssize_t n = write(master, in.pending, in.pending_len);
      if (n > 0) {
        memmove(in.pending, in.pending + n, in.pending_len - (size_t)n);
        in.pending_len -= (size_t)n;
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP)) {
      if (cap - in.len < IO_CHUNK) {
        cap = in.len + IO_CHUNK;
        in.buf = realloc(in.buf, cap);
        if (!in.buf) die("realloc");
      }
      ssize_t n = read(0, in.buf + in.len, IO_CHUNK);
      if (n > 0) {
        in.len += (size_t)n;
        parse_input(master, &in);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        /* The agent closed the terminal: hang it up, as a dropped connection does. */
        stdin_open = 0;
        kill(-child, SIGHUP);
        kill(child, SIGHUP);
      }
    }
  }
  /* The command has exited: pass on what it wrote last. Its background children may still
   * hold the slave open, so take what is there now rather than waiting for EOF. */
  drain_master(master, &stdout_ok);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}
