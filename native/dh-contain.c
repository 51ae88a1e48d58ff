/*
 * dh-contain: how the local sandbox starts every process, in one exec (src/sandbox/local-containment.ts builds the
 * command line and compiles this file on first use).
 *
 *   dh-contain [--pid PARENT] [--net] [--drop UID:GID] [--forward SOCKET PORT] -- PROGRAM [ARG...]
 *
 * --pid PARENT  A PID namespace of its own (and a mount namespace with a fresh /proc). This process dies with PARENT
 *               (the worker), forks the namespace's PID 1 and waits for it; PID 1 forks PROGRAM (which is therefore not
 *               PID 1: the kernel drops the signals a PID 1 sets no handler for, so it would never see a cancel's
 *               SIGTERM), reaps every orphan and, when PROGRAM exits, exits with its status (128+n for signal n): the
 *               kernel then kills whatever else lives in the namespace. SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to
 *               this process reach PROGRAM's process group through PID 1; signals sent to PID 1 from inside the
 *               namespace are dropped. Without --pid the steps below run in place and PROGRAM replaces this process.
 * --net         A network namespace of its own whose loopback is brought up.
 * --drop U:G    PROGRAM runs as U:G: no supplementary groups, no new privileges, empty capability sets (the inheritable,
 *               ambient and bounding sets too).
 * --forward     Before PROGRAM (with --pid --net): listen on 127.0.0.1:PORT in the namespace and pipe every connection,
 *               byte for byte, to the Unix socket SOCKET (the run's egress gateway), connected by its name from inside
 *               its directory, so a long path is no obstacle to sun_path. The forwarder is a background process of
 *               this process's user (a dropped PROGRAM cannot signal it), one child per connection, at most 256 at once;
 *               it dies with the namespace. It listens before PROGRAM starts.
 * Not as root, a namespace comes with a user namespace mapping the current uid and gid to themselves.
 *
 * Exit status 125 and a line on stderr when the containment itself fails; 127 when PROGRAM cannot be executed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <linux/capability.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

static void fail(const char *what) {
  fprintf(stderr, "durable-harness contain: %s: %s\n", what, strerror(errno));
  _exit(125);
}

static void usage(const char *why) {
  fprintf(stderr, "durable-harness contain: %s\n", why);
  _exit(125);
}

static void write_file(const char *file, const char *text) {
  int fd = open(file, O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(file);
  ssize_t length = (ssize_t)strlen(text);
  if (write(fd, text, (size_t)length) != length) fail(file);
  close(fd);
}

/* New namespaces; not as root, inside a user namespace that maps the current uid and gid to themselves. */
static void enter_namespaces(int flags) {
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (uid != 0) flags |= CLONE_NEWUSER;
  if (unshare(flags) < 0) fail("unshare");
  if (uid == 0) return;
  char map[64];
  write_file("/proc/self/setgroups", "deny");
  snprintf(map, sizeof map, "%u %u 1", (unsigned)uid, (unsigned)uid);
  write_file("/proc/self/uid_map", map);
  snprintf(map, sizeof map, "%u %u 1", (unsigned)gid, (unsigned)gid);
  write_file("/proc/self/gid_map", map);
}

/* The new network namespace's loopback up, as `ip link set lo up` (needs CAP_NET_ADMIN there; without it lo stays down). */
static void loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
    ifr.ifr_flags |= IFF_UP;
    (void)ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  close(s);
}

/* As setpriv --reuid U --regid G --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all. */
static void drop_to(uid_t uid, gid_t gid) {
  for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) fail("drop the bounding set");
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) fail("clear the ambient set");
  if (setgroups(0, NULL) < 0) fail("setgroups");
  if (setresgid(gid, gid, gid) < 0) fail("setresgid");
  if (setresuid(uid, uid, uid) < 0) fail("setresuid");
  /* The uid change emptied the permitted and effective sets; the inheritable one is kept: empty it too. */
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &header, data) < 0) fail("capset");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail("no_new_privs");
}

/* Default dispositions and an empty mask, as a program expects them at its start. */
static void default_signals(void) {
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig != SIGKILL && sig != SIGSTOP) (void)signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

static void null_stdio(int last) {
  int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (fd < 0) fail("/dev/null");
  for (int i = 0; i <= last; i++) dup2(fd, i);
  if (fd > last) close(fd);
}

/* Writes all of `length` bytes; 0 when the peer is gone. */
static int write_all(int fd, const char *data, ssize_t length) {
  while (length > 0) {
    ssize_t n = write(fd, data, (size_t)length);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    data += n;
    length -= n;
  }
  return 1;
}

/* One connection: `client` and the gateway's socket piped both ways, each direction closed (half) when its side ends. */
static void relay(int client, const struct sockaddr_un *door) {
  int gate = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (gate < 0 || connect(gate, (const struct sockaddr *)door, sizeof *door) < 0) _exit(1);
  int one = 1;
  (void)setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct pollfd ends[2] = {{client, POLLIN, 0}, {gate, POLLIN, 0}};
  const int to[2] = {gate, client};
  static char buffer[1 << 16];
  for (int open_ways = 2; open_ways > 0;) {
    if (poll(ends, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    for (int k = 0; k < 2; k++) {
      if (ends[k].fd < 0 || !(ends[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(ends[k].fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) _exit(0); /* a reset: the other way has nothing left to say either */
      if (n == 0) {
        (void)shutdown(to[k], SHUT_WR);
        ends[k].fd = -1;
        open_ways--;
      } else if (!write_all(to[k], buffer, n)) {
        _exit(0);
      }
    }
  }
  _exit(0);
}

/* The gateway forwarder (see --forward): listening when this returns, serving in a background process. */
static void forward(const char *socket_path, int port) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) fail("forwarder socket");
  int one = 1;
  (void)setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in at;
  memset(&at, 0, sizeof at);
  at.sin_family = AF_INET;
  at.sin_port = htons((uint16_t)port);
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, (struct sockaddr *)&at, sizeof at) < 0) fail("forwarder bind");
  if (listen(listener, 128) < 0) fail("forwarder listen");
  char dir[PATH_MAX], name[PATH_MAX];
  if (strlen(socket_path) >= sizeof dir) usage("--forward: the socket path is too long");
  strcpy(dir, socket_path);
  strcpy(name, socket_path);
  struct sockaddr_un door;
  memset(&door, 0, sizeof door);
  door.sun_family = AF_UNIX;
  if (snprintf(door.sun_path, sizeof door.sun_path, "./%s", basename(name)) >= (int)sizeof door.sun_path) usage("--forward: the socket's name is too long");
  pid_t server = fork();
  if (server < 0) fail("fork");
  if (server > 0) {
    close(listener);
    return;
  }
  /* Its name for /proc's comm (its argv is the helper's own, as for PID 1); the connections' children inherit it. */
  (void)prctl(PR_SET_NAME, "dh-forwarder", 0, 0, 0);
  default_signals();
  (void)signal(SIGPIPE, SIG_IGN);
  null_stdio(2);
  if (chdir(dirname(dir)) < 0) _exit(1);
  int connections = 0;
  for (;;) {
    int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    if (client < 0) continue; /* EINTR, an aborted connection, a full table: the next one may do */
    /* After the accept: the connections that ended while it waited count no more. */
    while (waitpid(-1, NULL, WNOHANG) > 0) connections--;
    if (connections >= 256) {
      close(client);
      continue;
    }
    pid_t connection = fork();
    if (connection == 0) {
      close(listener);
      relay(client, &door);
    }
    if (connection > 0) connections++;
    close(client);
  }
}

static int status_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct options {
  pid_t parent; /* > 0: a PID namespace; the process whose death kills this one */
  int net;
  int drop;
  uid_t uid;
  gid_t gid;
  const char *forward_socket;
  int forward_port;
  char **argv;
};

/* PID 1 of the namespace: PROGRAM in the foreground, orphans reaped, PROGRAM's status as its own. */
static void namespace_init(const struct options *o, const sigset_t *waited, int alive) {
  /* Dies with the outer process; if that one is gone already, the pipe it holds open says so. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) fail("pdeathsig");
  struct pollfd gone = {alive, POLLIN, 0};
  if (poll(&gone, 1, 0) > 0 && (gone.revents & (POLLHUP | POLLERR))) _exit(125);
  close(alive);
  /* Out of the worker's process group: a group signal reaches the outer process only, which forwards it once. */
  setpgid(0, 0);
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) fail("make mounts private");
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) fail("mount /proc");
  if (o->net) loopback_up();
  if (o->forward_socket) forward(o->forward_socket, o->forward_port);
  pid_t program = fork();
  if (program < 0) fail("fork");
  if (program == 0) {
    setpgid(0, 0);
    if (o->drop) drop_to(o->uid, o->gid);
    default_signals();
    execv(o->argv[0], o->argv);
    fprintf(stderr, "durable-harness contain: cannot run %s: %s\n", o->argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(program, program); /* also here: a signal forwarded before the child ran must find its group */
  /* Only PROGRAM and its descendants hold the worker's stdin and stdout: its output ends when theirs does. */
  null_stdio(1);
  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(waited, &info);
    if (sig < 0) continue; /* EINTR (a stop and continue) */
    if (sig == SIGCHLD) {
      int status;
      pid_t pid;
      while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == program) _exit(status_code(status));
      }
    } else if (info.si_pid == 0) {
      /* From outside the namespace (si_pid 0): the outer process or the worker. From inside: dropped, as for any PID 1. */
      if (kill(-program, sig) < 0) (void)kill(program, sig);
    }
  }
}

int main(int argc, char **argv) {
  struct options o;
  memset(&o, 0, sizeof o);
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--pid") == 0 && i + 1 < argc) {
      o.parent = (pid_t)atoi(argv[++i]);
      if (o.parent <= 0) usage("--pid needs the parent's pid");
    } else if (strcmp(argv[i], "--net") == 0) {
      o.net = 1;
    } else if (strcmp(argv[i], "--drop") == 0 && i + 1 < argc) {
      unsigned uid, gid;
      char end;
      if (sscanf(argv[++i], "%u:%u%c", &uid, &gid, &end) != 2) usage("--drop needs UID:GID");
      o.drop = 1;
      o.uid = (uid_t)uid;
      o.gid = (gid_t)gid;
    } else if (strcmp(argv[i], "--forward") == 0 && i + 2 < argc) {
      o.forward_socket = argv[++i];
      o.forward_port = atoi(argv[++i]);
      if (o.forward_port <= 0 || o.forward_port > 65535) usage("--forward needs a socket path and a port");
    } else {
      usage("usage: dh-contain [--pid PARENT] [--net] [--drop UID:GID] [--forward SOCKET PORT] -- PROGRAM [ARG...]");
    }
  }
  if (i + 1 >= argc) usage("no program after --");
  if (o.forward_socket && !o.net) usage("--forward needs --net");
  o.argv = argv + i + 1;

  if (!o.parent) {
    if (o.forward_socket) usage("--forward needs --pid");
    if (o.net) {
      enter_namespaces(CLONE_NEWNET);
      loopback_up();
    }
    if (o.drop) drop_to(o.uid, o.gid);
    execv(o.argv[0], o.argv);
    fprintf(stderr, "durable-harness contain: cannot run %s: %s\n", o.argv[0], strerror(errno));
    return 127;
  }

  /* Dies with the worker (a SIGKILLed worker leaves no turn running); if it died before this line, go now. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) fail("pdeathsig");
  if (getppid() != o.parent) _exit(125);
  enter_namespaces(CLONE_NEWPID | CLONE_NEWNS | (o.net ? CLONE_NEWNET : 0));

  sigset_t waited;
  sigemptyset(&waited);
  sigaddset(&waited, SIGCHLD);
  for (size_t k = 0; k < sizeof forwarded / sizeof forwarded[0]; k++) sigaddset(&waited, forwarded[k]);
  sigprocmask(SIG_BLOCK, &waited, NULL);

  int alive[2];
  if (pipe2(alive, O_CLOEXEC) < 0) fail("pipe");
  pid_t init = fork();
  if (init < 0) fail("fork");
  if (init == 0) {
    close(alive[1]);
    namespace_init(&o, &waited, alive[0]);
  }
  close(alive[0]); /* alive[1] stays open as long as this process lives */
  null_stdio(1);
  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(&waited, &info);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      (void)kill(init, sig);
      continue;
    }
    int status;
    if (waitpid(init, &status, WNOHANG) != init) continue;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    /* PID 1 was killed (SIGKILL from outside): end the same way, so the worker sees the signal. */
    int killed = WTERMSIG(status);
    signal(killed, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, killed);
    sigprocmask(SIG_UNBLOCK, &only, NULL);
    kill(getpid(), killed);
    return 128 + killed;
  }
}
