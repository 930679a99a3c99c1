/* Process-wide state of the shim: configuration, job identity, warnings,
 * fork handlers and the summary written at exit. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlshim/proto.h"
#include "dlshim/rundir.h"
#include "h5desc.h"
#include "real.h"
#include "shim.h"

struct dlshim_config g_cfg;
int g_active;
__thread int g_in_shim;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pid_t job_owner; /* this process created the job (or was first to see it) */
pid_t g_job_owner_pid;  /* the job's first process, in this process or an ancestor */
static atomic_int warned[W_MAX];

static void write_stderr(const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(2, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* One line on stderr: prefix, message, newline; errno untouched. */
static void emit(const char *prefix, const char *fmt, va_list ap)
{
	int saved = errno;
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "%s", prefix);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	write_stderr(buf, (size_t)n);
	errno = saved;
}

int shim_warned(enum warn_cause c) { return atomic_load(&warned[c]); }

void shim_warn(enum warn_cause c, const char *fmt, ...)
{
	if (g_cfg.log_level < DLSHIM_LOG_WARN && c != W_CONFIG)
		return;
	if (atomic_exchange(&warned[c], 1))
		return; /* one line per cause per process */
	va_list ap;
	va_start(ap, fmt);
	emit("dlshim: warning: ", fmt, ap);
	va_end(ap);
}

void shim_debug(const char *fmt, ...)
{
	if (g_cfg.log_level < DLSHIM_LOG_DEBUG)
		return;
	char prefix[32];
	snprintf(prefix, sizeof(prefix), "dlshim[%d]: ", (int)getpid());
	va_list ap;
	va_start(ap, fmt);
	emit(prefix, fmt, ap);
	va_end(ap);
}

int rundir_self_dir(char *out, size_t len)
{
	Dl_info di;
	if (dladdr((void *)&rundir_self_dir, &di) == 0 || di.dli_fname == NULL)
		return -1;
	const char *slash = strrchr(di.dli_fname, '/');
	if (slash == NULL)
		return snprintf(out, len, ".") < (int)len ? 0 : -1;
	size_t n = (size_t)(slash - di.dli_fname);
	if (n + 1 > len)
		return -1;
	memcpy(out, di.dli_fname, n);
	out[n] = 0;
	return 0;
}

/* The job is named by DLSHIM_JOB; the first shim instance without one makes
 * a name and exports it, so every forked or exec'd child is the same job.
 * Ranks of a torchrun job share the launcher's run id. */
static void derive_job(void)
{
	const char *owner = getenv("DLSHIM_JOB_OWNER");
	if (owner)
		g_job_owner_pid = (pid_t)atoi(owner);
	if (owner == NULL) {
		char pid[24];
		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		setenv("DLSHIM_JOB_OWNER", pid, 1);
		job_owner = g_job_owner_pid = getpid();
	}
	if (g_cfg.job[0])
		return;
	const char *run = getenv("TORCHELASTIC_RUN_ID");
	if (run && *run) {
		snprintf(g_cfg.job, sizeof(g_cfg.job), "ddp-%.100s", run);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		snprintf(g_cfg.job, sizeof(g_cfg.job), "job-%d-%lx", (int)getpid(),
			 (unsigned long)((ts.tv_sec * 1000003L) ^ ts.tv_nsec) & 0xffffffUL);
	}
	setenv("DLSHIM_JOB", g_cfg.job, 1);
}

/* A top-level number of the job's stats JSON (keys before "per_epoch"). */
static double json_num(const char *json, const char *key)
{
	char pat[48];
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	const char *p = strstr(json, pat);
	const char *end = strstr(json, "\"per_epoch\"");
	return p && (!end || p < end) ? strtod(p + strlen(pat), NULL) : 0;
}

/* DLSHIM_LOG=info: one line per job when its first process exits. */
static void print_summary(const char *json)
{
	double req = json_num(json, "requests"), hits = json_num(json, "hits");
	double mb = 1024.0 * 1024.0;
	char line[512];
	snprintf(line, sizeof(line),
		 "dlshim: job %s: %.0f opens, %.0f cache hits (%.0f%%), %.0f redirected, %.0f epochs, %.1f MB from "
		 "disk, %.1f MB from cache, I/O efficiency %.2f",
		 g_cfg.job, req, hits, req > 0 ? 100.0 * hits / req : 0.0, json_num(json, "redirects"),
		 json_num(json, "epochs"), json_num(json, "bytes_from_disk") / mb,
		 json_num(json, "bytes_from_cache") / mb, json_num(json, "io_efficiency"));
	size_t n = strlen(line);
	line[n++] = '\n';
	write_stderr(line, n);
}

static void at_exit(void)
{
	if (!g_active)
		return;
	g_in_shim++;
	fdt_drop_all();
	client_rows_flush();
	int summary = g_cfg.log_level >= DLSHIM_LOG_INFO;
	if (job_owner == getpid() && (g_cfg.stats_path[0] || summary)) {
		static char json[DLSHIM_MSG_MAX + 1];
		long n = client_fetch_stats(json, sizeof(json));
		if (n >= 0 && summary)
			print_summary(json);
		if (g_cfg.stats_path[0] && (n < 0 || client_write_stats(g_cfg.stats_path, json, (size_t)n) < 0))
			shim_warn(W_STATS, "could not write DLSHIM_STATS=%s (no coordinator contact in this process?)",
				  g_cfg.stats_path);
	}
	g_in_shim--;
}

static const char *env_get(const char *name) { return getenv(name); }

static void do_init(void)
{
	real_init();
	char err[512];
	g_in_shim++;
	if (dlshim_config_parse(&g_cfg, env_get, 0, err, sizeof(err)) < 0) {
		/* Bad configuration: one clear message, then a pure pass-through. */
		g_cfg.log_level = DLSHIM_LOG_WARN;
		shim_warn(W_CONFIG, "%s; the shim is disabled for this process", err);
		g_in_shim--;
		return;
	}
	if (g_cfg.disabled || g_cfg.nroots == 0) {
		g_in_shim--;
		return;
	}
	derive_job();
	if (g_cfg.sampler == DLSHIM_SAMPLER_DSA && g_cfg.redirect == DLSHIM_REDIRECT_OFF)
		shim_warn(W_DSA, "DLSHIM_SAMPLER=dsa has no effect without DLSHIM_REDIRECT=dir or any; reading files as requested");
	pthread_atfork(client_atfork_prepare, client_atfork_parent, client_atfork_child);
	pthread_atfork(fdt_atfork_prepare, fdt_atfork_parent, fdt_atfork_child);
	pthread_atfork(h5desc_atfork_prepare, h5desc_atfork_parent, h5desc_atfork_child);
	atexit(at_exit);
	crash_install();
	g_active = 1;
	g_in_shim--;
}

void shim_init(void) { pthread_once(&init_once, do_init); }

__attribute__((constructor)) static void shim_ctor(void) { shim_init(); }
