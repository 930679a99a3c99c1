/* dlshimd: the per-user coordinator. Creates the shared segment, listens on
 * the runtime directory's socket, serves clients until idle or stopped. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "daemon.h"
#include "h5rows.h"
#include "memlimit.h"
#include "dlshim/rundir.h"
#include "peer_module.h"

struct daemon D;

void dlog(int level, const char *fmt, ...)
{
	if (level > (int)D.cfg.log_level)
		return;
	char buf[1024];
	static const char *names[] = {"error", "warn", "info", "debug"};
	int n = snprintf(buf, sizeof(buf), "dlshimd[%d] %ld %s: ", (int)getpid(), (long)time(NULL), names[level]);
	va_list ap;
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	if (write(D.log_fd >= 0 ? D.log_fd : 2, buf, (size_t)n) < 0) {
		/* nowhere else to report it */
	}
}

/* A crash leaves a backtrace in the log before the default action runs. */
static void crash_handler(int sig)
{
	char line[256];
	int fd = D.log_fd >= 0 ? D.log_fd : 2;
	int n = snprintf(line, sizeof(line), "dlshimd[%d] fatal signal %d; backtrace:\n", (int)getpid(), sig);
	if (write(fd, line, (size_t)n) < 0)
		_exit(128 + sig);
	unw_cursor_t cur;
	unw_context_t ctx;
	unw_getcontext(&ctx);
	unw_init_local(&cur, &ctx);
	for (int depth = 0; depth < 64 && unw_step(&cur) > 0; depth++) {
		unw_word_t ip, offp;
		char name[128] = "?";
		unw_get_reg(&cur, UNW_REG_IP, &ip);
		unw_get_proc_name(&cur, name, sizeof(name), &offp);
		n = snprintf(line, sizeof(line), "  #%d 0x%lx %s+0x%lx\n", depth, (unsigned long)ip, name,
			     (unsigned long)offp);
		if (write(fd, line, (size_t)n) < 0)
			break;
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void usage(void)
{
	fprintf(stderr, "usage: dlshimd [--foreground] [--daemonize] [--ready-fd N]\n"
			"Configuration comes from the DLSHIM_* environment (see docs/configuration.md).\n");
}

static int make_segment(void)
{
	D.shm_len = D.cfg.cache_bytes;
	uint64_t limit = memlimit_cgroup_bytes();
	if (memlimit_cap(D.shm_len, limit) < D.shm_len) {
		D.shm_len = memlimit_cap(D.shm_len, limit);
		D.memcg_limit = limit;
		dlog(DLSHIM_LOG_WARN,
		     "DLSHIM_CACHE=%llu bytes does not fit the memory cgroup limit of %llu bytes: cache capped to %zu bytes",
		     (unsigned long long)D.cfg.cache_bytes, (unsigned long long)limit, D.shm_len);
	}
	D.shm_fd = memfd_create("dlshim-cache", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (D.shm_fd < 0 || ftruncate(D.shm_fd, (off_t)D.shm_len) < 0) {
		dlog(DLSHIM_LOG_ERROR, "cannot create a %zu-byte shared segment: %s", D.shm_len, strerror(errno));
		return -1;
	}
	/* Clients cannot resize it under us. */
	fcntl(D.shm_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	void *base = mmap(NULL, D.shm_len, PROT_READ | PROT_WRITE, MAP_SHARED, D.shm_fd, 0);
	if (base == MAP_FAILED) {
		dlog(DLSHIM_LOG_ERROR, "cannot map the shared segment: %s", strerror(errno));
		return -1;
	}
	D.shm_base = base;
	struct dlshim_engine_opts o = {.shm_base = base,
				       .shm_len = D.shm_len,
				       .evict = D.cfg.evict,
				       .seed = D.cfg.seed,
				       .max_item_bytes = D.cfg.max_item_bytes};
	D.eng = dlshim_engine_create(&o);
	if (D.eng == NULL) {
		dlog(DLSHIM_LOG_ERROR, "cannot create the engine over %zu bytes", D.shm_len);
		return -1;
	}
	D.segment_id = dlshim_engine_segment_id(D.eng);
	return 0;
}

static int make_listener(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (rundir_sock_path(D.cfg.runtime_dir, a.sun_path, sizeof(a.sun_path)) < 0) {
		dlog(DLSHIM_LOG_ERROR, "runtime directory path too long for a socket: %s", D.cfg.runtime_dir);
		return -1;
	}
	unlink(a.sun_path); /* stale socket of a dead coordinator; we hold the lock */
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 128) < 0) {
		dlog(DLSHIM_LOG_ERROR, "cannot listen on %s: %s", a.sun_path, strerror(errno));
		return -1;
	}
	chmod(a.sun_path, 0600);
	return fd;
}

/* Jobs with no process left for JOB_LINGER_S are over. Called with D.mu. */
static void end_lingering_jobs(void)
{
	time_t now = time(NULL);
	for (int j = 0; j < dlshim_engine_njobs(D.eng); j++)
		if (dlshim_engine_job_live(D.eng, j) && dlshim_engine_job_sessions(D.eng, j) == 0 &&
		    (now - D.job_idle_since[j] >= JOB_LINGER_S ||
		     (D.job_owner[j] > 0 && kill(D.job_owner[j], 0) < 0 && errno == ESRCH))) {
			dlog(DLSHIM_LOG_INFO, "job %s ended", dlshim_engine_job_name(D.eng, j));
			dlshim_engine_job_end(D.eng, j);
			h5rows_job_end(j);
			D.job_owner[j] = 0;
			D.job_spans[j] = 0;
			D.claims_refused[j] = 0;
		}
}

/* Accept clients until stopped or idle for cfg.idle_exit_s. */
static void serve(void)
{
	for (;;) {
		struct pollfd p = {D.listen_fd, POLLIN, 0};
		int r = poll(&p, 1, 250);
		if (D.stopping)
			return;
		if (r == 1 && (p.revents & POLLIN)) {
			int c = accept4(D.listen_fd, NULL, NULL, SOCK_CLOEXEC);
			struct ucred cr;
			socklen_t l = sizeof(cr);
			if (c < 0) {
				/* nothing to accept after all */
			} else if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0 || cr.uid != geteuid()) {
				dlog(DLSHIM_LOG_WARN, "refusing a connection from uid %d", (int)cr.uid);
				close(c);
			} else {
				pthread_t t;
				pthread_attr_t at;
				pthread_attr_init(&at);
				pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
				if (pthread_create(&t, &at, conn_thread, (void *)(intptr_t)c) != 0)
					close(c);
				pthread_attr_destroy(&at);
			}
		}
		/* Housekeeping on every turn, not only when no one connects: a
		 * CLI polling stats must not keep jobs or the daemon alive. */
		pthread_mutex_lock(&D.mu);
		end_lingering_jobs();
		/* A node of a cluster is home for its peers' requests: it stays. */
		int idle = D.nclients == 0 && time(NULL) - D.idle_since >= (time_t)D.cfg.idle_exit_s && !peer_module_enabled();
		pthread_mutex_unlock(&D.mu);
		if (idle) {
			dlog(DLSHIM_LOG_INFO, "idle for %u s with no clients: exiting", D.cfg.idle_exit_s);
			return;
		}
	}
}

static const char *env_get(const char *name) { return getenv(name); }

int main(int argc, char **argv)
{
	int ready_fd = -1, daemonize = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--foreground") == 0)
			daemonize = 0;
		else if (strcmp(argv[i], "--daemonize") == 0)
			daemonize = 1;
		else if (strcmp(argv[i], "--ready-fd") == 0 && i + 1 < argc)
			ready_fd = atoi(argv[++i]);
		else {
			usage();
			return 2;
		}
	}
	D.log_fd = -1;
	char err[512];
	unsetenv("LD_PRELOAD");
	if (dlshim_config_parse(&D.cfg, env_get, 0, err, sizeof(err)) < 0) {
		fprintf(stderr, "dlshimd: %s\n", err);
		return 2;
	}
	if (rundir_ensure(D.cfg.runtime_dir) < 0) {
		fprintf(stderr, "dlshimd: runtime directory %s must be a directory owned by you with mode 0700\n",
			D.cfg.runtime_dir);
		return 2;
	}
	if (daemonize) {
		pid_t p = fork();
		if (p < 0)
			return 1;
		if (p > 0)
			_exit(0); /* the spawner reaps us; the daemon is reparented */
		setsid();
		int nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			close(nul);
		}
	}
	char path[DLSHIM_PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/dlshimd.log", D.cfg.runtime_dir);
	D.log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (daemonize && D.log_fd >= 0)
		dup2(D.log_fd, 2);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGSEGV, crash_handler);
	signal(SIGBUS, crash_handler);
	signal(SIGABRT, crash_handler);
	signal(SIGFPE, crash_handler);

	/* One coordinator per runtime directory: the lock is held for life. */
	snprintf(path, sizeof(path), "%s/dlshimd.lock", D.cfg.runtime_dir);
	int lk = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	/* A coordinator that is exiting still holds it for a moment: wait a little. */
	int locked = -1;
	for (int tries = 0; lk >= 0 && tries < 100 && (locked = flock(lk, LOCK_EX | LOCK_NB)) < 0; tries++)
		usleep(50000);
	if (lk < 0 || locked < 0) {
		dlog(DLSHIM_LOG_INFO, "another coordinator holds %s; exiting", path);
		if (ready_fd >= 0 && write(ready_fd, "R", 1) < 0)
			return 1;
		return 0;
	}
	pthread_mutex_init(&D.mu, NULL);
	pthread_cond_init(&D.loaded, NULL);
	D.started = D.idle_since = time(NULL);
	if (make_segment() < 0 || loader_start(8) < 0 || (D.listen_fd = make_listener()) < 0) {
		if (ready_fd >= 0 && write(ready_fd, "E", 1) < 0)
			return 1;
		return 1;
	}
	peer_module_start(); /* multi-node is optional: on failure this node serves locally */
	dlog(DLSHIM_LOG_INFO, "listening in %s, cache %zu bytes, eviction %s", D.cfg.runtime_dir, D.shm_len,
	     dlshim_evict_name(D.cfg.evict));
	if (ready_fd >= 0) {
		if (write(ready_fd, "R", 1) < 0)
			dlog(DLSHIM_LOG_WARN, "spawner went away before we were ready");
		close(ready_fd);
	}
	serve();
	/* Stop accepting before anything else so new clients spawn a fresh one. */
	char sp[DLSHIM_PATH_MAX];
	if (rundir_sock_path(D.cfg.runtime_dir, sp, sizeof(sp)) == 0)
		unlink(sp);
	close(D.listen_fd);
	dlog(DLSHIM_LOG_INFO, "exiting");
	return 0;
}
