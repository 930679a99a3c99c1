/* dlshim: the command-line tool (status, stats, stop, run). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dlshim/config.h"
#include "dlshim/packet.h"
#include "dlshim/proto.h"
#include "dlshim/rundir.h"

static struct dlshim_config cfg;
static char reply_buf[DLSHIM_MSG_MAX + sizeof(struct dlshim_msg_hdr)];

static const char *env_get(const char *name) { return getenv(name); }

static void usage(FILE *f)
{
	fprintf(f, "usage: dlshim COMMAND\n"
		   "  status          is the coordinator running; clients, jobs, cache use (exit 3 if not running)\n"
		   "  stats [--json]  per-job requests, hits, bytes from cache and from disk\n"
		   "  stop            stop the coordinator\n"
		   "  run [--] CMD... run CMD with the shim preloaded (set DLSHIM_ROOTS first)\n"
		   "  help            this text\n");
}

static int connect_control(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (rundir_sock_path(cfg.runtime_dir, a.sun_path, sizeof(a.sun_path)) < 0)
		return -1;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	struct timeval tv = {10, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Send a request and receive the reply of type `want`; returns payload length. */
static long request(int fd, uint16_t type, const void *p, uint32_t len, uint16_t want)
{
	char out[sizeof(struct dlshim_msg_hdr) + 512];
	size_t n = dlshim_msg_encode(out, type, 1, p, len);
	if (dlshim_send_packet(fd, out, n, -1) < 0)
		return -1;
	int fds[DLSHIM_PACKET_MAX_FDS], nfds, trunc;
	ssize_t r = dlshim_recv_packet(fd, reply_buf, sizeof(reply_buf) - 1, fds, &nfds, &trunc);
	for (int i = 0; i < nfds; i++)
		close(fds[i]); /* the CLI never maps the cache */
	if (r <= 0 || trunc)
		return -1;
	struct dlshim_msg_hdr h;
	const void *payload;
	const char *why;
	if (dlshim_msg_decode(reply_buf, (size_t)r, &h, &payload, &why) < 0 || h.type != want)
		return -1;
	memmove(reply_buf, payload, h.len);
	reply_buf[h.len] = 0;
	return h.len;
}

static int control_session(void)
{
	int fd = connect_control();
	if (fd < 0)
		return -1;
	struct dlshim_msg_hello h;
	memset(&h, 0, sizeof(h));
	h.pid = (uint32_t)getpid();
	h.kind = DLSHIM_HELLO_CONTROL;
	if (request(fd, DLSHIM_MSG_HELLO, &h, sizeof(h), DLSHIM_MSG_HELLO_OK) != sizeof(struct dlshim_msg_hello_ok)) {
		close(fd);
		return -1;
	}
	return fd;
}

static const char *fetch_json(void)
{
	int fd = control_session();
	if (fd < 0)
		return NULL;
	long n = request(fd, DLSHIM_MSG_STATS, NULL, 0, DLSHIM_MSG_TEXT);
	close(fd);
	return n < 0 ? NULL : reply_buf;
}

/* Minimal extraction of a numeric or string field after position p. */
static const char *field(const char *p, const char *key, char *out, size_t len)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	const char *q = strstr(p, pat);
	if (q == NULL) {
		snprintf(out, len, "?");
		return p;
	}
	q += strlen(pat);
	if (*q == '"')
		q++;
	size_t i = 0;
	while (*q && *q != ',' && *q != '"' && *q != '}' && i + 1 < len)
		out[i++] = *q++;
	out[i] = 0;
	return q;
}

static double num(const char *p, const char *key)
{
	char v[64];
	field(p, key, v, sizeof(v));
	return strtod(v, NULL);
}

static void human_bytes(double b, char *out, size_t len)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;
	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	snprintf(out, len, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

static int cmd_status(void)
{
	const char *j = fetch_json();
	if (j == NULL) {
		printf("dlshim coordinator: not running (runtime dir %s)\n", cfg.runtime_dir);
		return 3;
	}
	const char *cache = strstr(j, "\"cache\"");
	char cap[32], used[32];
	human_bytes(num(cache, "capacity_bytes"), cap, sizeof(cap));
	human_bytes(num(cache, "used_bytes"), used, sizeof(used));
	int live = 0, total = 0;
	for (const char *p = strstr(j, "\"jobs\""); p && (p = strstr(p, "\"live\":")); p++) {
		total++;
		live += strncmp(p + 7, "true", 4) == 0;
	}
	printf("dlshim coordinator: running (pid %.0f, up %.0f s, runtime dir %s)\n", num(j, "pid"), num(j, "uptime_s"),
	       cfg.runtime_dir);
	printf("  clients: %.0f connections in %.0f processes\n", num(j, "clients"), num(j, "sessions"));
	printf("  jobs:    %d live, %d ended\n", live, total - live);
	printf("  cache:   %s used of %s, %.0f files resident, %.0f pinned, eviction %s\n", used, cap,
	       num(cache, "items_resident"), num(cache, "items_pinned"), strstr(j, "\"evict\":\"lru\"") ? "lru" :
	       strstr(j, "\"evict\":\"fifo\"") ? "fifo" : strstr(j, "\"evict\":\"random\"") ? "random" : "refcnt");
	return 0;
}

static int cmd_stats(int json)
{
	const char *j = fetch_json();
	if (j == NULL) {
		fprintf(stderr, "dlshim: the coordinator is not running (runtime dir %s)\n", cfg.runtime_dir);
		return 3;
	}
	if (json) {
		fputs(j, stdout);
		return 0;
	}
	printf("%-28s %5s %9s %9s %9s %11s %11s %11s\n", "job", "live", "requests", "hits", "misses", "from cache",
	       "from disk", "passthru");
	for (const char *p = strstr(j, "{\"job\":"); p; p = strstr(p + 1, "{\"job\":")) {
		char name[DLSHIM_JOB_MAX], live[8], a[32], b[32], c[32];
		field(p, "job", name, sizeof(name));
		field(p, "live", live, sizeof(live));
		human_bytes(num(p, "bytes_from_cache"), a, sizeof(a));
		human_bytes(num(p, "bytes_from_disk"), b, sizeof(b));
		human_bytes(num(p, "bytes_passthrough"), c, sizeof(c));
		printf("%-28s %5s %9.0f %9.0f %9.0f %11s %11s %11s\n", name, live[0] == 't' ? "yes" : "no",
		       num(p, "requests"), num(p, "hits"), num(p, "misses"), a, b, c);
	}
	return 0;
}

static int cmd_stop(void)
{
	int fd = control_session();
	if (fd < 0) {
		printf("dlshim coordinator: not running\n");
		return 0;
	}
	long n = request(fd, DLSHIM_MSG_STOP, NULL, 0, DLSHIM_MSG_TEXT);
	close(fd);
	/* Wait until it no longer answers, so a following start is clean. */
	for (int i = 0; i < 100; i++) {
		int f = connect_control();
		if (f < 0)
			break;
		close(f);
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	printf("dlshim coordinator: %s\n", n < 0 ? "stop request failed" : "stopped");
	return n < 0 ? 1 : 0;
}

static int cmd_run(int argc, char **argv)
{
	if (argc > 0 && strcmp(argv[0], "--") == 0) {
		argc--;
		argv++;
	}
	if (argc == 0) {
		usage(stderr);
		return 2;
	}
	/* The library lives next to this binary (build tree) or in ../lib. */
	char self[PATH_MAX], lib[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = 0;
	*strrchr(self, '/') = 0;
	snprintf(lib, sizeof(lib), "%s/libdlshim.so", self);
	if (access(lib, R_OK) != 0)
		snprintf(lib, sizeof(lib), "%s/../lib/libdlshim.so", self);
	char *resolved = realpath(lib, NULL);
	if (resolved == NULL) {
		fprintf(stderr, "dlshim: cannot find libdlshim.so next to %s\n", self);
		return 1;
	}
	const char *old = getenv("LD_PRELOAD");
	char *val = malloc(strlen(resolved) + (old ? strlen(old) : 0) + 2);
	if (val == NULL)
		return 1;
	sprintf(val, "%s%s%s", resolved, old && *old ? ":" : "", old ? old : "");
	setenv("LD_PRELOAD", val, 1);
	if (getenv("DLSHIM_ROOTS") == NULL)
		fprintf(stderr, "dlshim: DLSHIM_ROOTS is not set: nothing will be routed\n");
	execvp(argv[0], argv);
	fprintf(stderr, "dlshim: cannot run %s: %s\n", argv[0], strerror(errno));
	return 127;
}

int main(int argc, char **argv)
{
	char err[512];
	if (dlshim_config_parse(&cfg, env_get, 0, err, sizeof(err)) < 0) {
		fprintf(stderr, "dlshim: %s\n", err);
		return 2;
	}
	if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "status") == 0)
		return cmd_status();
	if (strcmp(argv[1], "stats") == 0)
		return cmd_stats(argc > 2 && strcmp(argv[2], "--json") == 0);
	if (strcmp(argv[1], "stop") == 0)
		return cmd_stop();
	if (strcmp(argv[1], "run") == 0)
		return cmd_run(argc - 2, argv + 2);
	fprintf(stderr, "dlshim: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
