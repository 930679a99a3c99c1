/* Client side of the coordinator protocol: a small pool of connections
 * (threads of one process open files concurrently), the mapped segment,
 * spawning the coordinator, and fork handling. Every system call here goes
 * through the real function table or is one the shim does not wrap. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlshim/fileid.h"
#include "dlshim/packet.h"
#include "dlshim/proto.h"
#include "dlshim/rows.h"
#include "real.h"
#include "dlshim/rundir.h"
#include "shim.h"

extern char **environ;

#define POOL_MAX 8

/* A connection may carry a lease of HDF5 rows the coordinator decided
 * for us (include/dlshim/rows.h): memory shared read-write with the
 * coordinator, used only by the thread holding the connection. */
struct lease_view {
	struct dlshim_rows_lease_shm *shm;
	uint32_t count, cur;      /* entries of the last fill (checked), next one to try */
	uint64_t dev, ino, nrows, seg_id;
};

struct conn {
	int fd;
	int busy;
	struct lease_view lease;
};

#define LEASE_LEN (((sizeof(struct dlshim_rows_lease_shm) + 4095) / 4096) * 4096)

/* Close a pooled connection and drop its lease mapping (the coordinator
 * settles the lease when it sees the connection end). */
static void conn_close(struct conn *c)
{
	real.close(c->fd);
	if (c->lease.shm)
		munmap(c->lease.shm, LEASE_LEN);
	c->lease.shm = NULL;
}

/* One mapped coordinator segment. Views are never unmapped: routes taken
 * from a coordinator that has since died keep reading valid bytes. */
struct segment {
	uint64_t id;
	struct dlshim_shm_view view;
	struct segment *next;
};

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static struct conn pool[POOL_MAX];
static int npool;
static struct segment *segments, *current_seg;
static uint64_t session_id;
static pid_t session_pid;
static uint32_t seqno;
static time_t next_retry; /* after a failure, do not hammer the coordinator */
static int ever_connected;

uint64_t client_session_id(void) { return session_id; }

static uint64_t new_session_id(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t z = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
	z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdULL;
	return (z ^ (z >> 33)) | 1;
}

/* ---- framing ---- */

static int send_msg(int fd, uint16_t type, const void *payload, uint32_t len, int pass_fd)
{
	static __thread char buf[sizeof(struct dlshim_msg_hdr) + 2 * DLSHIM_PATH_MAX + 128];
	if (len > sizeof(buf) - sizeof(struct dlshim_msg_hdr))
		return -1;
	size_t n = dlshim_msg_encode(buf, type, ++seqno, payload, len);
	return dlshim_send_packet(fd, buf, n, pass_fd);
}

/* Receive one packet into `buf` (aligned); returns payload length or -1.
 * A passed descriptor is returned in *rfd (or closed when rfd is NULL). */
static long recv_msg(int fd, void *buf, size_t cap, uint16_t want, int *rfd)
{
	int fds[DLSHIM_PACKET_MAX_FDS], nfds, trunc;
	ssize_t r = dlshim_recv_packet(fd, buf, cap, fds, &nfds, &trunc);
	int keep = rfd && nfds > 0 ? fds[0] : -1;
	for (int i = keep >= 0 ? 1 : 0; i < nfds; i++)
		real.close(fds[i]);
	if (rfd)
		*rfd = -1;
	struct dlshim_msg_hdr h;
	const void *payload;
	const char *why;
	if (r <= 0 || trunc || dlshim_msg_decode(buf, (size_t)r, &h, &payload, &why) || h.type != want) {
		if (keep >= 0)
			real.close(keep);
		return -1;
	}
	if (rfd)
		*rfd = keep;
	memmove(buf, payload, h.len);
	return h.len;
}

/* ---- connecting and spawning ---- */

static int connect_sock(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	/* Only a private directory of ours can hold our coordinator's socket:
	 * anyone able to plant one elsewhere would receive our descriptors. */
	if (rundir_check(g_cfg.runtime_dir) < 0 || rundir_sock_path(g_cfg.runtime_dir, a.sun_path, sizeof(a.sun_path)) < 0)
		return -1;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int r;
	do
		r = connect(fd, (struct sockaddr *)&a, sizeof(a));
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		real.close(fd);
		return -1;
	}
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cr.uid != geteuid()) {
		real.close(fd); /* not our coordinator */
		return -1;
	}
	struct timeval tv = {120, 0}; /* a load on slow storage may take a while; never hang for ever */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

static int find_daemon(char *out, size_t len)
{
	/* out holds at least DLSHIM_PATH_MAX + 32 bytes. */
	if (g_cfg.daemon_path[0]) {
		snprintf(out, len, "%s", g_cfg.daemon_path);
		return access(out, X_OK);
	}
	/* Next to the library (build tree), or ../bin/ for an installed prefix. */
	char self[DLSHIM_PATH_MAX];
	if (rundir_self_dir(self, sizeof(self)) < 0)
		return -1;
	snprintf(out, len, "%s/dlshimd", self);
	if (access(out, X_OK) == 0)
		return 0;
	snprintf(out, len, "%s/../bin/dlshimd", self);
	return access(out, X_OK);
}

/* Start the coordinator detached, without LD_PRELOAD, and wait until it
 * listens. The spawn lock makes concurrent first opens start only one. */
static int spawn_daemon(void)
{
	char path[DLSHIM_PATH_MAX + 32], lockp[DLSHIM_PATH_MAX + 32];
	if (rundir_ensure(g_cfg.runtime_dir) < 0) {
		shim_warn(W_SPAWN, "runtime directory %s is unusable (must be a private directory owned by you)",
			  g_cfg.runtime_dir);
		return -1;
	}
	snprintf(lockp, sizeof(lockp), "%s/spawn.lock", g_cfg.runtime_dir);
	int lk = real.openat(AT_FDCWD, lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lk < 0)
		return -1;
	int r;
	do
		r = flock(lk, LOCK_EX);
	while (r < 0 && errno == EINTR);
	int fd = connect_sock();
	if (fd >= 0)
		goto out;
	if (find_daemon(path, sizeof(path)) < 0) {
		shim_warn(W_SPAWN, "cannot find dlshimd next to the library; set DLSHIM_DAEMON");
		goto out;
	}
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		goto out;
	/* The child's environment: ours without LD_PRELOAD. */
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 1, sizeof(char *));
	if (env == NULL) {
		real.close(pfd[0]);
		real.close(pfd[1]);
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			env[k++] = environ[i];
	char fdarg[16];
	snprintf(fdarg, sizeof(fdarg), "%d", pfd[1]);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	/* The write end must survive exec: clear CLOEXEC by dup2 onto itself is
	 * not possible, so dup it to a fixed number in the child. */
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 3);
	char *argv[] = {path, "--daemonize", "--ready-fd", "3", NULL};
	(void)fdarg;
	pid_t pid;
	int err = posix_spawn(&pid, path, &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	free(env);
	real.close(pfd[1]);
	if (err == 0) {
		/* The intermediate process exits as soon as the daemon forked. */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		struct pollfd p = {pfd[0], POLLIN, 0};
		int pr;
		do
			pr = poll(&p, 1, 10000);
		while (pr < 0 && errno == EINTR);
		char c = 0;
		if (pr == 1 && real.read(pfd[0], &c, 1) == 1 && c == 'R')
			fd = connect_sock();
	}
	real.close(pfd[0]);
	if (fd < 0)
		shim_warn(W_SPAWN, "could not start the coordinator %s (see %s/dlshimd.log)", path, g_cfg.runtime_dir);
out:
	flock(lk, LOCK_UN);
	real.close(lk);
	return fd;
}

/* Map the segment passed with HELLO_OK unless it is the current one. */
static int adopt_segment(int sfd, const struct dlshim_msg_hello_ok *ok)
{
	if (current_seg && current_seg->id == ok->segment_id) {
		real.close(sfd);
		return 0;
	}
	for (struct segment *s = segments; s; s = s->next)
		if (s->id == ok->segment_id) {
			current_seg = s;
			real.close(sfd);
			return 0;
		}
	void *p = mmap(NULL, ok->shm_len, PROT_READ, MAP_SHARED, sfd, 0);
	real.close(sfd);
	if (p == MAP_FAILED)
		return -1;
	struct segment *s = calloc(1, sizeof(*s));
	if (s == NULL || dlshim_shm_attach(p, ok->shm_len, &s->view) < 0 ||
	    s->view.hdr->segment_id != ok->segment_id) {
		munmap(p, ok->shm_len);
		free(s);
		return -1;
	}
	s->id = ok->segment_id;
	s->next = segments;
	segments = s;
	current_seg = s;
	return 0;
}

/* Tell the coordinator what the job's dataset is (it scans it once per
 * job) and which redirect mode the job runs in. */
static int declare_dataset(int fd)
{
	static char buf[sizeof(struct dlshim_msg_dataset) + 2 * DLSHIM_PATH_MAX + 64];
	struct dlshim_msg_dataset d = {.redirect = g_cfg.redirect, .sampler = g_cfg.sampler, .chunk = g_cfg.chunk};
	size_t n = sizeof(d);
	memcpy(buf, &d, n);
	for (int i = 0; i < g_cfg.nroots; i++) {
		size_t l = g_cfg.root_len[i];
		if (n + l + 2 + DLSHIM_PATH_MAX >= sizeof(buf))
			break;
		if (i)
			buf[n++] = ',';
		memcpy(buf + n, g_cfg.roots[i], l);
		n += l;
	}
	buf[n++] = 0;
	size_t fl = strlen(g_cfg.filelist);
	memcpy(buf + n, g_cfg.filelist, fl + 1);
	n += fl + 1;
	if (send_msg(fd, DLSHIM_MSG_DATASET, buf, (uint32_t)n, -1) < 0)
		return -1;
	static char rep[sizeof(struct dlshim_msg_hdr) + 1024];
	long r = recv_msg(fd, rep, sizeof(rep) - 1, DLSHIM_MSG_TEXT, NULL);
	if (r < 0)
		return -1;
	rep[r] = 0;
	if (strncmp(rep, "error:", 6) == 0)
		shim_warn(W_PROTO, "dataset: %s", rep + 7);
	else
		shim_debug("dataset: %s", rep);
	return 0;
}

static int hello(int fd, uint32_t kind)
{
	struct dlshim_msg_hello h;
	memset(&h, 0, sizeof(h));
	h.pid = (uint32_t)getpid();
	h.kind = kind;
	h.session = session_id;
	h.job_owner = (uint32_t)g_job_owner_pid;
	h.flags = g_cfg.job_spans ? DLSHIM_HELLO_F_SPANS : 0;
	snprintf(h.job, sizeof(h.job), "%s", g_cfg.job);
	if (send_msg(fd, DLSHIM_MSG_HELLO, &h, sizeof(h), -1) < 0)
		return -1;
	union {
		struct dlshim_msg_hello_ok ok;
		char raw[sizeof(struct dlshim_msg_hdr) + 512];
	} b;
	int sfd;
	if (recv_msg(fd, &b, sizeof(b), DLSHIM_MSG_HELLO_OK, &sfd) != sizeof(b.ok) || sfd < 0) {
		if (sfd >= 0)
			real.close(sfd);
		return -1;
	}
	if (adopt_segment(sfd, &b.ok) < 0)
		return -1;
	if (b.ok.flags & DLSHIM_HELLO_OK_F_MEMCAP)
		shim_warn(W_MEMCAP,
			  "the coordinator's memory cgroup limit is below DLSHIM_CACHE: cache capped to %llu MB "
			  "(see %s/dlshimd.log)",
			  (unsigned long long)(b.ok.shm_len >> 20), g_cfg.runtime_dir);
	return kind == DLSHIM_HELLO_CLIENT ? declare_dataset(fd) : 0;
}

/* The process id for the checks below during an HDF5 row read, set for
 * the duration of client_rows (0 elsewhere), without a system call (a
 * redirected sample made eight of them, at a microsecond or more each on
 * a VM). */
static __thread pid_t rows_pid;
static pid_t cur_pid(void) { return rows_pid ? rows_pid : getpid(); }

/* Called with pool_mu held. */
static void fork_check(void)
{
	if (session_pid == cur_pid())
		return;
	/* First use in this process, or a child created without our atfork
	 * handler (raw clone): connections belong to the parent. */
	for (int i = 0; i < npool; i++)
		if (pool[i].fd >= 0 && session_pid != 0)
			conn_close(&pool[i]);
	npool = 0;
	session_id = new_session_id();
	session_pid = getpid();
}

/* Take a free connection, opening one if the pool has room. -1 if the
 * coordinator cannot be reached (then the caller passes through). */
static int pool_get(void)
{
	pthread_mutex_lock(&pool_mu);
	fork_check();
	for (;;) {
		for (int i = 0; i < npool; i++)
			if (!pool[i].busy) {
				pool[i].busy = 1;
				pthread_mutex_unlock(&pool_mu);
				return i;
			}
		if (npool < POOL_MAX)
			break;
		pthread_cond_wait(&pool_cv, &pool_mu);
	}
	time_t now = time(NULL);
	if (now < next_retry) {
		pthread_mutex_unlock(&pool_mu);
		return -1;
	}
	int fd = -1;
	/* Two attempts: a coordinator that is just exiting for idleness may
	 * accept and then close; the second attempt spawns a fresh one. */
	for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
		fd = connect_sock();
		if (fd < 0 && npool == 0)
			fd = spawn_daemon();
		if (fd >= 0 && hello(fd, DLSHIM_HELLO_CLIENT) < 0) {
			real.close(fd);
			fd = -1;
		}
	}
	if (fd < 0) {
		next_retry = now + 1;
		if (!ever_connected && !shim_warned(W_SPAWN))
			shim_warn(W_CONNECT, "cannot reach the coordinator in %s; reading files directly",
				  g_cfg.runtime_dir);
		pthread_mutex_unlock(&pool_mu);
		return -1;
	}
	ever_connected = 1;
	int i = npool++;
	pool[i] = (struct conn){.fd = fd, .busy = 1};
	pthread_mutex_unlock(&pool_mu);
	return i;
}

static void pool_put(int i, int broken)
{
	pthread_mutex_lock(&pool_mu);
	if (broken) {
		conn_close(&pool[i]);
		pool[i] = pool[--npool];
		/* A dead coordinator breaks every connection: drop them all so the
		 * next open reconnects (and respawns) instead of failing one by one. */
		for (int k = 0; k < npool; k++)
			if (!pool[k].busy) {
				conn_close(&pool[k]);
				pool[k] = pool[--npool];
				k--;
			}
		next_retry = time(NULL) + 1;
		shim_warn(W_LOST, "lost the coordinator connection; reading files directly until it is back");
	} else {
		pool[i].busy = 0;
	}
	pthread_cond_signal(&pool_cv);
	pthread_mutex_unlock(&pool_mu);
}

/* ---- requests ---- */

/* The hit path: a resident, unchanged file found through the shared index
 * needs no round trip. Exact mode only (redirect decisions are the
 * coordinator's), and only once a segment is mapped in this process. */
/* A route reading `size` bytes of slot/gen of `seg` for this process. */
static struct route *route_to_slot(struct segment *seg, uint32_t slot, uint64_t gen, uint64_t size)
{
	struct route *r = route_new();
	if (r == NULL)
		return NULL;
	r->slot = slot;
	r->gen = gen;
	r->size = size;
	r->view = &seg->view;
	r->owner = getpid();
	r->session = session_id;
	return r;
}

static struct route *fast_open(const struct stat *st)
{
	pthread_mutex_lock(&pool_mu);
	struct segment *seg = session_pid == getpid() ? current_seg : NULL;
	pthread_mutex_unlock(&pool_mu);
	if (seg == NULL || g_cfg.redirect != DLSHIM_REDIRECT_OFF)
		return NULL;
	uint64_t gen;
	struct dlshim_file_id v = dlshim_stat_version(st);
	int64_t mt = v.mtime_ns;
	long s = dlshim_shm_lookup(&seg->view, v.dev, v.ino, v.size, mt, v.ctime_ns, &gen);
	if (s < 0)
		return NULL;
	struct route *r = route_to_slot(seg, (uint32_t)s, gen, (uint64_t)st->st_size);
	if (r == NULL)
		return NULL;
	r->fast = 1;
	r->dev = (uint64_t)st->st_dev;
	r->ino = (uint64_t)st->st_ino;
	r->fsize = (uint64_t)st->st_size;
	r->mtime_ns = mt;
	return r;
}

struct route *client_open(int fd, const struct stat *st)
{
	struct route *fr = fast_open(st);
	if (fr)
		return fr;
	int c = pool_get();
	if (c < 0)
		return NULL;
	int cfd = pool[c].fd;
	struct dlshim_file_id v = dlshim_stat_version(st);
	struct dlshim_msg_open o = {
		.dev = v.dev, .ino = v.ino, .size = v.size, .mtime_ns = v.mtime_ns, .ctime_ns = v.ctime_ns};
	union {
		struct dlshim_msg_open_r r;
		char raw[sizeof(struct dlshim_msg_hdr) + 512];
	} b;
	int sfd = -1;
	/* In exact mode an OPEN that reaches the coordinator is most likely a
	 * miss (hits are found in the shared index): send our descriptor along
	 * to save the NEED_FD round trip. */
	int pass = g_cfg.redirect == DLSHIM_REDIRECT_OFF ? fd : -1;
	if (send_msg(cfd, DLSHIM_MSG_OPEN, &o, sizeof(o), pass) < 0 ||
	    recv_msg(cfd, &b, sizeof(b), DLSHIM_MSG_OPEN_R, &sfd) != sizeof(b.r))
		goto broken;
	if (b.r.status == DLSHIM_OPEN_R_NEED_FD) {
		/* A miss: hand over our descriptor so the coordinator loads
		 * exactly the file we opened. */
		if (sfd >= 0)
			real.close(sfd);
		if (send_msg(cfd, DLSHIM_MSG_LOADFD, NULL, 0, fd) < 0 ||
		    recv_msg(cfd, &b, sizeof(b), DLSHIM_MSG_OPEN_R, &sfd) != sizeof(b.r))
			goto broken;
	}
	struct segment *seg = current_seg;
	pool_put(c, 0);
	uint64_t size = o.size;
	if (b.r.flags & DLSHIM_OPEN_R_F_FD) {
		/* Redirected: the descriptor number the program holds now refers
		 * to the served file, so fstat, mmap and plain reads agree. */
		int cloexec = real.fcntl(fd, F_GETFD) & FD_CLOEXEC;
		struct stat sst;
		if (sfd < 0 || fstat(sfd, &sst) < 0 || real.dup3(sfd, fd, cloexec ? O_CLOEXEC : 0) < 0) {
			if (sfd >= 0)
				real.close(sfd);
			client_release_slot(b.r.status == DLSHIM_OPEN_R_HIT ? b.r.slot : UINT32_MAX, b.r.gen);
			return NULL;
		}
		real.close(sfd);
		size = (uint64_t)sst.st_size;
	} else if (sfd >= 0) {
		real.close(sfd);
	}
	if (b.r.status != DLSHIM_OPEN_R_HIT || seg == NULL || b.r.size != size) {
		if (b.r.status == DLSHIM_OPEN_R_HIT)
			client_release_slot(b.r.slot, b.r.gen);
		return NULL;
	}
	return route_to_slot(seg, b.r.slot, b.r.gen, b.r.size);
broken:
	pool_put(c, 1);
	return NULL;
}

int client_open_remote(const char *path, int flags, struct route **out)
{
	*out = NULL;
	int c = pool_get();
	if (c < 0)
		return -1;
	union {
		struct dlshim_msg_open_r r;
		char raw[sizeof(struct dlshim_msg_hdr) + 512];
	} b;
	int sfd = -1;
	if (send_msg(pool[c].fd, DLSHIM_MSG_OPEN_PATH, path, (uint32_t)strlen(path) + 1, -1) < 0 ||
	    recv_msg(pool[c].fd, &b, sizeof(b), DLSHIM_MSG_OPEN_R, &sfd) != sizeof(b.r)) {
		pool_put(c, 1);
		return -1;
	}
	struct segment *seg = current_seg;
	pool_put(c, 0);
	struct stat st;
	if (b.r.status != DLSHIM_OPEN_R_HIT || sfd < 0 || seg == NULL || fstat(sfd, &st) < 0 ||
	    (uint64_t)st.st_size != b.r.size) {
		if (b.r.status == DLSHIM_OPEN_R_ABSENT)
			shim_warn(W_PEERS, "%s is on no reachable node (see dlshimd.log in %s)", path, g_cfg.runtime_dir);
		if (b.r.status == DLSHIM_OPEN_R_HIT)
			client_release_slot(b.r.slot, b.r.gen);
		if (sfd >= 0)
			real.close(sfd);
		return -1;
	}
	/* Received close-on-exec; keep it only if the program asked for it. */
	if (!(flags & O_CLOEXEC))
		real.fcntl(sfd, F_SETFD, 0);
	/* Without a route the descriptor alone is correct, only slower. */
	*out = route_to_slot(seg, b.r.slot, b.r.gen, b.r.size);
	if (*out == NULL)
		client_release_slot(b.r.slot, b.r.gen);
	return sfd;
}

static void release_msg(uint32_t slot, uint64_t gen, uint64_t bytes_cache, uint64_t bytes_pass);
static void send_release(const struct dlshim_msg_release *m);

void client_release_slot(uint32_t slot, uint64_t gen) { release_msg(slot, gen, 0, 0); }

void client_release(const struct route *r, uint64_t bytes_cache, uint64_t bytes_pass)
{
	if (!r->fast) {
		release_msg(r->slot, r->gen, bytes_cache, bytes_pass);
		return;
	}
	struct dlshim_msg_release m = {.slot = UINT32_MAX, .bytes_cache = bytes_cache, .bytes_pass = bytes_pass,
				       .dev = r->dev, .ino = r->ino, .size = r->fsize, .mtime_ns = r->mtime_ns,
				       .flags = DLSHIM_RELEASE_F_FAST};
	send_release(&m);
}

static void release_msg(uint32_t slot, uint64_t gen, uint64_t bytes_cache, uint64_t bytes_pass)
{
	struct dlshim_msg_release m = {
		.item = 0, .slot = slot, .gen = gen, .bytes_cache = bytes_cache, .bytes_pass = bytes_pass};
	send_release(&m);
}

static void send_release(const struct dlshim_msg_release *m)
{
	/* Do not start or spawn a coordinator just to release. */
	pthread_mutex_lock(&pool_mu);
	int have = npool > 0 && session_pid == getpid();
	pthread_mutex_unlock(&pool_mu);
	if (!have)
		return;
	int c = pool_get();
	if (c < 0)
		return;
	int bad = send_msg(pool[c].fd, DLSHIM_MSG_RELEASE, m, sizeof(*m), -1) < 0;
	pool_put(c, bad);
}

long client_fetch_stats(char *buf, size_t cap)
{
	/* The job's first process may never have opened a file itself (its
	 * DataLoader workers did): connect, but never spawn, to ask. */
	int sock = connect_sock();
	if (sock < 0)
		return -1;
	real.close(sock);
	int c = pool_get();
	if (c < 0)
		return -1;
	long n = -1;
	if (send_msg(pool[c].fd, DLSHIM_MSG_STATS, NULL, 0, -1) == 0)
		n = recv_msg(pool[c].fd, buf, cap - 1, DLSHIM_MSG_TEXT, NULL);
	pool_put(c, n < 0);
	if (n >= 0)
		buf[n] = 0;
	return n;
}

int client_write_stats(const char *path, const char *json, size_t len)
{
	int fd = real.openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	ssize_t w = write(fd, json, len);
	real.close(fd);
	return w == (ssize_t)len ? 0 : -1;
}

/* ---- fork ---- */

void client_atfork_prepare(void) { pthread_mutex_lock(&pool_mu); }
void client_atfork_parent(void) { pthread_mutex_unlock(&pool_mu); }
/* HDF5 row mappings remembered before a fork are the parent's. */
static unsigned pair_fork_gen = 1;

void client_atfork_child(void)
{
	/* The child must not share the parent's sockets: close its copies and
	 * start a session of its own on first use. */
	for (int i = 0; i < npool; i++)
		conn_close(&pool[i]);
	npool = 0;
	session_pid = 0;
	pair_fork_gen++;
	pthread_mutex_init(&pool_mu, NULL);
	pthread_cond_init(&pool_cv, NULL);
}

/* ---- HDF5 rows ---- */

#include "dlshim/rows.h"

/* What the coordinator told us about a dataset's row chunks, so later exact
 * reads find resident chunks in the shared index without a round trip. */
struct row_plan {
	uint64_t dev, ino, size, dset_hash, nrows, row_bytes, chunk_rows;
	int64_t mtime_ns;
	uint32_t redirect;        /* the chunking depends on the mode */
};
#define ROW_PLANS 16
static struct row_plan row_plans[ROW_PLANS];
static unsigned row_plan_next;
static pthread_mutex_t rows_mu = PTHREAD_MUTEX_INITIALIZER;
/* Reads served through the index, and row reads served another row than
 * asked (redirects), reported in batches (per process). */
static pid_t fast_pid;
static uint64_t fast_hits, fast_bytes, fast_redirects;
#define FAST_BATCH 64

static uint64_t plan_find(const struct dlshim_msg_rows *m, uint64_t dh)
{
	uint64_t k = 0;
	pthread_mutex_lock(&rows_mu);
	for (int i = 0; i < ROW_PLANS; i++) {
		const struct row_plan *p = &row_plans[i];
		if (p->chunk_rows && p->dev == m->dev && p->ino == m->ino && p->size == m->size &&
		    p->mtime_ns == m->mtime_ns && p->dset_hash == dh && p->nrows == m->nrows && p->row_bytes == m->row_bytes &&
		    p->redirect == m->redirect)
			k = p->chunk_rows;
	}
	pthread_mutex_unlock(&rows_mu);
	return k;
}

static void plan_put(const struct dlshim_msg_rows *m, uint64_t dh, uint64_t k)
{
	if (plan_find(m, dh) == k)
		return;
	pthread_mutex_lock(&rows_mu);
	row_plans[row_plan_next++ % ROW_PLANS] = (struct row_plan){m->dev, m->ino, m->size, dh, m->nrows, m->row_bytes,
								   k, m->mtime_ns, m->redirect};
	pthread_mutex_unlock(&rows_mu);
}

static void send_fast(uint64_t hits, uint64_t bytes, uint64_t redirects)
{
	struct dlshim_msg_release r = {.item = (uint32_t)hits, .slot = UINT32_MAX, .bytes_cache = bytes,
				       .gen = redirects, .flags = DLSHIM_RELEASE_F_ROWS};
	send_release(&r);
}

static void note_fast(uint64_t hits, uint64_t bytes, uint64_t redirects)
{
	uint64_t h = 0, b = 0, rd = 0;
	pthread_mutex_lock(&rows_mu);
	if (fast_pid != cur_pid()) {
		fast_pid = cur_pid(); /* a forked child: the parent reports its own */
		fast_hits = fast_bytes = fast_redirects = 0;
	}
	fast_hits += hits;
	fast_bytes += bytes;
	fast_redirects += redirects;
	if (fast_hits >= FAST_BATCH || fast_redirects >= FAST_BATCH) {
		h = fast_hits, b = fast_bytes, rd = fast_redirects;
		fast_hits = fast_bytes = fast_redirects = 0;
	}
	pthread_mutex_unlock(&rows_mu);
	if (h || rd)
		send_fast(h, b, rd);
}

void client_rows_flush(void)
{
	pthread_mutex_lock(&rows_mu);
	int mine = fast_pid == getpid();
	uint64_t h = mine ? fast_hits : 0, b = fast_bytes, rd = mine ? fast_redirects : 0;
	fast_hits = fast_bytes = fast_redirects = 0;
	pthread_mutex_unlock(&rows_mu);
	if (h || rd)
		send_fast(h, b, rd);
}

/* The session's segment, or NULL (not connected in this process yet). */
static struct segment *rows_segment(void)
{
	pthread_mutex_lock(&pool_mu);
	struct segment *seg = session_pid == cur_pid() ? current_seg : NULL;
	pthread_mutex_unlock(&pool_mu);
	return seg;
}

/* Copy rows from the chunk holding `row` if the shared index has it:
 * the number of rows copied, 0 when it must be asked for. */
static uint64_t fast_rows(const struct dlshim_msg_rows *m, uint64_t dh, uint64_t k, uint64_t row, uint64_t want,
			  void *dst)
{
	struct segment *seg = rows_segment();
	if (seg == NULL)
		return 0;
	uint64_t first = row / k * k, count = m->nrows - first < k ? m->nrows - first : k;
	struct dlshim_file_id id;
	dlshim_rows_chunk_id(m->dev, m->ino, m->mtime_ns, dh, k, first / k, count * m->row_bytes, &id);
	uint64_t gen;
	long slot = dlshim_shm_lookup(&seg->view, id.dev, id.ino, id.size, id.mtime_ns, id.ctime_ns, &gen);
	if (slot < 0)
		return 0;
	uint64_t take = first + count - row < want ? first + count - row : want;
	struct dlshim_shm_cursor cur = {0};
	ssize_t got = dlshim_shm_read(&seg->view, (uint32_t)slot, gen, (row - first) * m->row_bytes, dst,
				      take * m->row_bytes, &cur);
	if (got != (ssize_t)(take * m->row_bytes))
		return 0;
	note_fast(1, take * m->row_bytes, 0);
	return take;
}

/* Row mappings (requested -> served) this thread was given, one per
 * requested row, so that the file's other datasets (labels after inputs)
 * read the same served row without asking, even when another process
 * started a new epoch between the sample's reads (the coordinator would
 * decide again). Not across fork. */
#define PAIRS 4
#define PAIR_DSETS 4
struct row_pair {
	uint64_t dev, ino, nrows, row, served, epochs;
	uint64_t seg_id;            /* the coordinator's segment (a restarted one knows nothing of it) */
	uint64_t dsets[PAIR_DSETS]; /* datasets that have read it */
	unsigned ndsets, fork_gen;
};
static __thread struct row_pair pairs[PAIRS];
static __thread unsigned pair_next;

static struct row_pair *pair_of(const struct dlshim_msg_rows *m, uint64_t seg_id)
{
	for (int i = 0; i < PAIRS; i++) {
		struct row_pair *p = &pairs[i];
		if (p->fork_gen == pair_fork_gen && p->seg_id == seg_id && p->row == m->row && p->dev == m->dev &&
		    p->ino == m->ino && p->nrows == m->nrows)
			return p;
	}
	return NULL;
}

/* What the remembered mapping says about dataset `dh` reading row m->row:
 * 0 nothing, or a new sample (this dataset read the row under an older
 * epoch count): take a row from the lease or ask; 1 the row this sample was
 * served (*out), for another dataset of the sample (now recorded as having
 * read it) or a re-read by the same dataset within the epoch count (it
 * keeps its row); -1 ask the coordinator (no room for another dataset). */
static int pair_find(const struct dlshim_msg_rows *m, uint64_t dh, uint64_t seg_id, uint64_t epochs,
		     struct row_pair **out)
{
	struct row_pair *p = pair_of(m, seg_id);
	if (p == NULL)
		return 0;
	int mine = 0;
	for (unsigned d = 0; d < p->ndsets; d++)
		mine |= p->dsets[d] == dh;
	if (mine && p->epochs != epochs)
		return 0;
	if (!mine && p->ndsets >= PAIR_DSETS)
		return -1;
	if (!mine)
		p->dsets[p->ndsets++] = dh;
	*out = p;
	return 1;
}

static void pair_put(const struct dlshim_msg_rows *m, uint64_t dh, uint64_t served, uint64_t seg_id, uint64_t epochs)
{
	struct row_pair *p = pair_of(m, seg_id); /* a row's new sample replaces its old one */
	if (p == NULL)
		p = &pairs[pair_next++ % PAIRS];
	*p = (struct row_pair){.dev = m->dev, .ino = m->ino, .nrows = m->nrows, .row = m->row, .served = served,
			       .epochs = epochs, .seg_id = seg_id, .dsets = {dh}, .ndsets = 1, .fork_gen = pair_fork_gen};
}

/* A single redirected row from a remembered mapping: 1 when copied from
 * the shared index, 2 when known but not in the index (the caller reads
 * exactly that row; another row would break the pair), with *served_out
 * set; 0 or -1 as pair_find. */
static int pair_rows(struct dlshim_msg_rows *m, uint64_t dh, void *dst, uint64_t *served_out)
{
	struct segment *seg = rows_segment();
	if (seg == NULL)
		return 0;
	struct row_pair *p = NULL;
	int known = pair_find(m, dh, seg->id, dlshim_shm_rows_epochs(&seg->view), &p);
	if (known <= 0)
		return known;
	*served_out = p->served;
	uint64_t k = plan_find(m, dh);
	return k && fast_rows(m, dh, k, p->served, 1, dst) == 1 ? 1 : 2;
}

/* Take a row from connection `c`'s lease for requested row `m->row`: the
 * served row, or -1 (no lease for this file, or none left). A served row
 * out of range is skipped untaken (the coordinator gets it back). */
static int64_t lease_take(struct conn *c, const struct dlshim_msg_rows *m, uint64_t dh, uint64_t seg_id)
{
	struct lease_view *v = &c->lease;
	if (v->shm == NULL || v->seg_id != seg_id || v->dev != m->dev || v->ino != m->ino || v->nrows != m->nrows)
		return -1;
	while (v->cur < v->count) {
		uint32_t t = v->cur++;
		uint32_t served = v->shm->served[t];
		if (served >= m->nrows)
			continue;
		v->shm->dset[t] = dh;
		uint64_t zero = 0;
		if (atomic_compare_exchange_strong(&v->shm->state[t], &zero, DLSHIM_LEASE_TAKEN | m->row))
			return served;
	}
	return -1;
}

/* A reply refilled connection `c`'s lease (its memory in `lfd` the first
 * time): remember what it covers. */
static void lease_update(struct conn *c, const struct dlshim_msg_rows_r *r, const struct dlshim_msg_rows *m,
			 const struct segment *seg, int lfd)
{
	struct lease_view *v = &c->lease;
	if (lfd >= 0) {
		struct stat st;
		void *p = MAP_FAILED;
		if (v->shm == NULL && fstat(lfd, &st) == 0 && (uint64_t)st.st_size >= LEASE_LEN)
			p = mmap(NULL, LEASE_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, lfd, 0);
		real.close(lfd);
		if (p != MAP_FAILED) {
			if (((struct dlshim_rows_lease_shm *)p)->magic == DLSHIM_LEASE_MAGIC)
				v->shm = p;
			else
				munmap(p, LEASE_LEN);
		}
	}
	if (!(r->flags & DLSHIM_ROWS_R_LEASE) || v->shm == NULL || seg == NULL)
		return;
	v->count = r->lease_count <= DLSHIM_LEASE_ROWS ? r->lease_count : 0;
	v->cur = 0;
	v->dev = m->dev;
	v->ino = m->ino;
	v->nrows = m->nrows;
	v->seg_id = seg->id;
}

/* Read served row `served` (taken from the lease of connection `c`, held
 * by the caller) through the index, or ask for it on `c`. 0 when copied to
 * `dst`; -1: the caller reads it through HDF5; -2: `c` broke. */
static int leased_read(int c, struct dlshim_msg_rows *m, char *msg, size_t mlen, uint64_t dh, uint64_t served,
		       void *dst)
{
	uint64_t k = plan_find(m, dh);
	if (k && fast_rows(m, dh, k, served, 1, dst) == 1)
		return 0;
	struct dlshim_msg_rows q = *m;
	q.row = served;
	q.count = 1;
	q.flags = DLSHIM_ROWS_F_LEASED;
	memcpy(msg, &q, sizeof(q));
	union {
		struct dlshim_msg_rows_r r;
		char raw[sizeof(struct dlshim_msg_hdr) + 512];
	} b;
	if (send_msg(pool[c].fd, DLSHIM_MSG_ROWS, msg, (uint32_t)mlen, -1) < 0 ||
	    recv_msg(pool[c].fd, &b, sizeof(b), DLSHIM_MSG_ROWS_R, NULL) != sizeof(b.r))
		return -2;
	const struct dlshim_msg_rows_r *r = &b.r;
	struct segment *seg = current_seg;
	if (r->status != DLSHIM_OPEN_R_HIT || seg == NULL || r->count == 0 || r->size != r->count * m->row_bytes ||
	    r->served != served || served < r->first || served >= r->first + r->count)
		return -1;
	struct dlshim_shm_cursor cur = {0};
	if (dlshim_shm_read(&seg->view, r->slot, r->gen, (served - r->first) * m->row_bytes, dst, m->row_bytes, &cur) !=
	    (ssize_t)m->row_bytes)
		return -1;
	if (r->chunk_rows && r->first % r->chunk_rows == 0)
		plan_put(m, dh, r->chunk_rows);
	return 0;
}

static int rows_read(const char *path, const char *dset, const struct stat *st, uint64_t nrows, uint64_t row_bytes,
		     uint64_t row, uint64_t n, int redirect, void *dst, uint64_t *served_out)
{
	static __thread char msg[sizeof(struct dlshim_msg_rows) + DLSHIM_PATH_MAX + 1024 + 2];
	*served_out = row;
	size_t pl = strlen(path), dl = strlen(dset);
	struct dlshim_msg_rows m = {
		.dev = (uint64_t)st->st_dev,
		.ino = (uint64_t)st->st_ino,
		.size = (uint64_t)st->st_size,
		.mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec,
		.nrows = nrows,
		.row_bytes = row_bytes,
		/* A block of rows is read as it is: redirection maps single rows,
		 * the unit a Dataset's __getitem__ asks for. */
		.redirect = n == 1 && redirect ? g_cfg.redirect : DLSHIM_REDIRECT_OFF,
		.chunk = g_cfg.chunk,
	};
	if (m.redirect != DLSHIM_REDIRECT_ANY)
		m.redirect = DLSHIM_REDIRECT_OFF; /* rows have no directories: dir reads them exactly */
	if (sizeof(m) + pl + dl + 2 > sizeof(msg) || pl == 0 || dl == 0)
		return -1;
	uint64_t dh = dlshim_rows_name_hash(dset);
	m.row = row;
	int paired = m.redirect != DLSHIM_REDIRECT_OFF ? pair_rows(&m, dh, dst, served_out) : 0;
	if (paired == 1)
		return 0;
	memcpy(msg + sizeof(m) + pl + 1, dset, dl + 1);
	memcpy(msg + sizeof(m), path, pl + 1);
	if (paired == 2) { /* the sample's row, not in the index: ask for exactly it */
		m.count = 1;
		int c = pool_get();
		if (c < 0)
			return -1;
		int rc = leased_read(c, &m, msg, sizeof(m) + pl + dl + 2, dh, *served_out, dst);
		pool_put(c, rc == -2);
		return rc == 0 ? 0 : -1;
	}
	if (m.redirect != DLSHIM_REDIRECT_OFF && paired == 0) {
		/* A row decided ahead for this connection: no message unless its
		 * chunk is not in the index. */
		struct segment *lseg = rows_segment();
		int c = lseg ? pool_get() : -1;
		if (c >= 0) {
			uint64_t epochs = dlshim_shm_rows_epochs(&lseg->view);
			m.count = 1;
			int64_t j = lease_take(&pool[c], &m, dh, lseg->id);
			if (j >= 0) {
				int rc = leased_read(c, &m, msg, sizeof(m) + pl + dl + 2, dh, (uint64_t)j, dst);
				pool_put(c, rc == -2);
				*served_out = (uint64_t)j;
				pair_put(&m, dh, (uint64_t)j, lseg->id, epochs);
				return rc == 0 ? 0 : -1;
			}
			pool_put(c, 0);
		}
		m.flags = DLSHIM_ROWS_F_LEASE;
	}
	uint64_t done = 0;
	while (done < n) {
		uint64_t k = m.redirect == DLSHIM_REDIRECT_OFF ? plan_find(&m, dh) : 0;
		uint64_t got_fast = k ? fast_rows(&m, dh, k, row + done, n - done, (char *)dst + done * row_bytes) : 0;
		if (got_fast) {
			done += got_fast;
			continue;
		}
		m.row = row + done;
		m.count = n - done;
		memcpy(msg, &m, sizeof(m));
		int c = pool_get();
		if (c < 0)
			return -1;
		/* Read before asking: a mapping is remembered only with the
		 * epoch count it was certainly current under. */
		struct segment *seg0 = current_seg;
		uint64_t epochs = seg0 ? dlshim_shm_rows_epochs(&seg0->view) : 0;
		union {
			struct dlshim_msg_rows_r r;
			char raw[sizeof(struct dlshim_msg_hdr) + 512];
		} b;
		int lfd = -1;
		if (send_msg(pool[c].fd, DLSHIM_MSG_ROWS, msg, (uint32_t)(sizeof(m) + pl + dl + 2), -1) < 0 ||
		    recv_msg(pool[c].fd, &b, sizeof(b), DLSHIM_MSG_ROWS_R, &lfd) != sizeof(b.r)) {
			pool_put(c, 1);
			return -1;
		}
		struct segment *seg = current_seg;
		if (m.flags & DLSHIM_ROWS_F_LEASE)
			lease_update(&pool[c], &b.r, &m, seg, lfd);
		else if (lfd >= 0)
			real.close(lfd);
		pool_put(c, 0);
		const struct dlshim_msg_rows_r *r = &b.r;
		if (r->flags & DLSHIM_ROWS_R_PARTIAL)
			shim_warn(W_ROWS_PARTIAL,
				  "%s:%s: the job read only part of this file's rows in an epoch; with DLSHIM_REDIRECT=any "
				  "it is served rows of the whole file, the rest included (a train/validation split by "
				  "index is not kept): keep splits in separate files or datasets, or use "
				  "DLSHIM_REDIRECT=off for this job",
				  path, dset);
		/* Once the coordinator has mapped the row, every way out reads the
		 * mapped row: the file's other datasets get the same one. */
		if (n == 1 && m.redirect != DLSHIM_REDIRECT_OFF && r->served < nrows) {
			*served_out = r->served;
			if (seg0 != NULL && seg0 == seg)
				pair_put(&m, dh, r->served, seg0->id, epochs);
		}
		if (r->status != DLSHIM_OPEN_R_HIT)
			return -1;
		/* Trust nothing in the reply that would copy out of the item or past
		 * the caller's rows. */
		uint64_t served = r->served, want = n - done;
		int ok = seg != NULL && r->count > 0 && r->size == r->count * row_bytes && served >= r->first &&
			 served < r->first + r->count && served < nrows && (served == m.row || n == 1);
		uint64_t take = ok ? r->first + r->count - served : 0;
		if (take > want)
			take = want;
		ssize_t got = -1;
		if (ok) {
			struct dlshim_shm_cursor cur = {0};
			got = dlshim_shm_read(&seg->view, r->slot, r->gen, (served - r->first) * row_bytes,
					      (char *)dst + done * row_bytes, take * row_bytes, &cur);
		}
		if (!ok || got != (ssize_t)(take * row_bytes))
			return -1;
		if (r->chunk_rows && r->first % r->chunk_rows == 0)
			plan_put(&m, dh, r->chunk_rows);
		done += take;
	}
	return 0;
}

int client_rows(const char *path, const char *dset, const struct stat *st, uint64_t nrows, uint64_t row_bytes,
		uint64_t row, uint64_t n, int redirect, void *dst, uint64_t *served_out)
{
	pid_t outer = rows_pid;
	rows_pid = shim_pid();
	int rc = rows_read(path, dset, st, nrows, row_bytes, row, n, redirect, dst, served_out);
	if (*served_out != row)
		note_fast(0, 0, 1); /* the caller reads the served row, from the cache or the file */
	rows_pid = outer;
	return rc;
}
