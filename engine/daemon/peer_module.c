/* Loads the multi-node module (peer_module.h) on demand and forwards to it.
 * The module resolves the coordinator's own symbols (D, dlog, the engine):
 * dlshimd is linked with --export-dynamic for it. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "peer_module.h"

#define MODULE_NAME "dlshimd-peers.so"

static struct {
	int (*start)(void);
	int (*enabled)(void);
	int (*remote_open)(struct session *, const char *, struct dlshim_msg_open_r *, int *);
	size_t (*json)(char *, size_t);
	void (*foreach_remote)(void (*)(void *, const char *, uint64_t, int64_t), void *);
	int (*find)(const char *, uint64_t *, int64_t *, uint64_t *);
	int (*fetch)(struct session *, struct peer_item *, int, char *, size_t);
	void (*note_served)(uint32_t);
	int (*prefetch_k)(void);
	int (*claim)(const char *, const char *, uint32_t, const char *, uint32_t, uint32_t *, uint64_t *, uint32_t *);
} M;
static char load_error[PATH_MAX + 256];

void peer_json_str(char *out, size_t cap, const char *s)
{
	size_t o = 0;
	for (; *s && o + 1 < cap; s++)
		out[o++] = (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) ? '?' : *s;
	out[o] = 0;
}

/* Next to the coordinator binary (the build tree), else ../lib/dlshim (an install). */
static void *open_module(void)
{
	char exe[PATH_MAX], path[PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		snprintf(load_error, sizeof(load_error), "cannot locate the coordinator binary to find " MODULE_NAME);
		return NULL;
	}
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	*slash = 0;
	const char *where[] = {"%s/" MODULE_NAME, "%s/../lib/dlshim/" MODULE_NAME};
	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		snprintf(path, sizeof(path), where[i], exe);
		if (access(path, R_OK) != 0)
			continue;
		void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (h == NULL)
			snprintf(load_error, sizeof(load_error), "cannot load %s: %s", path, dlerror());
		return h;
	}
	snprintf(load_error, sizeof(load_error), "multi-node module " MODULE_NAME " not found next to %s/dlshimd", exe);
	return NULL;
}

int peer_module_start(void)
{
	if (D.cfg.peers[0] == 0)
		return 1;
	void *h = open_module();
	if (h != NULL) {
		*(void **)&M.start = dlsym(h, "peer_start");
		*(void **)&M.enabled = dlsym(h, "peer_enabled");
		*(void **)&M.remote_open = dlsym(h, "remote_open");
		*(void **)&M.json = dlsym(h, "peer_json");
		*(void **)&M.foreach_remote = dlsym(h, "peer_catalog_foreach_remote");
		*(void **)&M.find = dlsym(h, "peer_catalog_find");
		*(void **)&M.fetch = dlsym(h, "remote_fetch");
		*(void **)&M.note_served = dlsym(h, "peer_note_served");
		*(void **)&M.prefetch_k = dlsym(h, "peer_prefetch_k");
		*(void **)&M.claim = dlsym(h, "peer_claim");
		if (!M.start || !M.enabled || !M.remote_open || !M.json || !M.foreach_remote || !M.find || !M.fetch ||
		    !M.note_served || !M.prefetch_k || !M.claim) {
			snprintf(load_error, sizeof(load_error), "%s lacks its entry points", MODULE_NAME);
			memset(&M, 0, sizeof(M));
		}
	}
	if (M.start == NULL) {
		dlog(DLSHIM_LOG_ERROR, "peers: %s; serving local data only", load_error);
		return -1;
	}
	return M.start();
}

int peer_module_enabled(void) { return M.enabled ? M.enabled() : 0; }

int peer_module_remote_open(struct session *s, const char *path, struct dlshim_msg_open_r *r, int *sfd)
{
	if (M.remote_open)
		return M.remote_open(s, path, r, sfd);
	memset(r, 0, sizeof(*r));
	r->status = DLSHIM_OPEN_R_ABSENT;
	*sfd = -1;
	return -1;
}

void peer_module_remote_files(void (*fn)(void *ctx, const char *path, uint64_t size, int64_t mtime_ns), void *ctx)
{
	if (peer_module_enabled())
		M.foreach_remote(fn, ctx);
}

int peer_module_lookup(const char *path, uint64_t *size, int64_t *mtime_ns, uint64_t *holders)
{
	return peer_module_enabled() ? M.find(path, size, mtime_ns, holders) : -1;
}

int peer_module_prefetch(void) { return peer_module_enabled() ? M.prefetch_k() : 0; }

int peer_module_fetch(struct session *s, struct peer_item *it, int n, char *why, size_t whylen)
{
	if (peer_module_enabled())
		return M.fetch(s, it, n, why, whylen);
	snprintf(why, whylen, "multi-node caching is off");
	return -1;
}

int peer_module_claim(const char *job, const char *group, uint32_t size, const char *path, uint32_t epoch,
		      uint32_t *at, uint64_t *sync, uint32_t *nsync)
{
	*at = epoch;
	*nsync = 0;
	return peer_module_enabled() ? M.claim(job, group, size, path, epoch, at, sync, nsync) : -2;
}

void peer_module_note_served(uint32_t item)
{
	if (M.note_served)
		M.note_served(item);
}

size_t peer_module_json(char *buf, size_t cap)
{
	if (M.json)
		return M.json(buf, cap);
	char e[sizeof(load_error)], devs[600];
	peer_json_str(e, sizeof(e), load_error);
	peer_json_str(devs, sizeof(devs), rdma_devices());
	int n = snprintf(buf, cap, "{\"enabled\":false,\"error\":\"%s\",\"rdma_devices\":\"%s\"}", e, devs);
	return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
