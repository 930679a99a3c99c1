/* The cluster-wide file catalog: this node's own files (what it is home
 * for) and every peer's, keyed by absolute path (all nodes mount their part
 * of the dataset under the same roots). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "daemon.h"
#include "dlshim/scan.h"
#include "peer.h"
#include "peer_wire.h"

struct entry {
	char *path;
	uint64_t size;
	int64_t mtime_ns;
	uint64_t holders;  /* remote: nodes that reported it */
	UT_hash_handle hh;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct entry *local, *remote;
static long nlocal, count_by_node[PEER_MAX_NODES];

static int local_cb(void *ctx, const char *path, const struct stat *st, const char *root)
{
	(void)ctx;
	(void)root;
	struct entry *e;
	if (st == NULL)
		return 0; /* a listed file that is not here (no list is used here) */
	HASH_FIND_STR(local, path, e);
	if (e)
		return 0;
	e = calloc(1, sizeof(*e));
	if (e == NULL || (e->path = strdup(path)) == NULL) {
		free(e);
		return 1;
	}
	e->size = (uint64_t)st->st_size;
	e->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
	HASH_ADD_KEYPTR(hh, local, e->path, strlen(e->path), e);
	nlocal++;
	return 0;
}

long peer_catalog_scan_local(const char *roots)
{
	char err[256];
	pthread_mutex_lock(&mu);
	long n = dlshim_scan(roots, "", local_cb, NULL, err, sizeof(err));
	pthread_mutex_unlock(&mu);
	if (n < 0)
		dlog(DLSHIM_LOG_WARN, "peers: cannot list the local dataset part: %s", err);
	return n;
}

void peer_catalog_encode_local(uint32_t node, uint64_t incarnation, void (*fn)(void *ctx, void *msg, size_t len),
			       void *ctx)
{
	pthread_mutex_lock(&mu);
	struct entry *e = local;
	do {
		char *msg = malloc(PEER_MSG_MAX);
		if (msg == NULL)
			break;
		struct peer_files h = {.node = node, .count = 0, .incarnation = incarnation};
		size_t len = sizeof(h);
		for (; e; e = e->hh.next) {
			uint32_t pl = (uint32_t)strlen(e->path);
			struct peer_file_ent fe = {e->size, e->mtime_ns, pl};
			if (len + sizeof(fe) + pl > PEER_MSG_MAX)
				break;
			memcpy(msg + len, &fe, sizeof(fe));
			memcpy(msg + len + sizeof(fe), e->path, pl);
			len += sizeof(fe) + pl;
			h.count++;
		}
		memcpy(msg, &h, sizeof(h));
		fn(ctx, msg, len); /* takes ownership */
	} while (e);
	pthread_mutex_unlock(&mu);
}

/* A path a peer may name: absolute, already normal, inside our roots. */
static int acceptable(const char *p, size_t l)
{
	char norm[DLSHIM_PATH_MAX];
	if (l == 0 || l >= DLSHIM_PATH_MAX || p[0] != '/' || memchr(p, 0, l))
		return 0;
	char tmp[DLSHIM_PATH_MAX];
	memcpy(tmp, p, l);
	tmp[l] = 0;
	long n = dlshim_path_normalize(NULL, tmp, norm, sizeof(norm));
	return n == (long)l && memcmp(norm, p, l) == 0 && dlshim_config_path_routed(&D.cfg, p, l);
}

int peer_catalog_add_msg(int node, const void *msg, size_t len)
{
	struct peer_files h;
	if (len < sizeof(h) || node < 0 || node >= PEER_MAX_NODES)
		return -1;
	memcpy(&h, msg, sizeof(h));
	const char *p = (const char *)msg + sizeof(h), *end = (const char *)msg + len;
	int bad = 0;
	pthread_mutex_lock(&mu);
	for (uint32_t i = 0; i < h.count; i++) {
		struct peer_file_ent fe;
		const char *path;
		if (peer_wire_files_next(&p, end, &fe, &path) < 0) {
			bad = 1;
			break;
		}
		if (!acceptable(path, fe.len)) {
			bad = 1; /* skip it, keep the rest */
			continue;
		}
		struct entry *e;
		HASH_FIND(hh, remote, path, fe.len, e);
		if (e == NULL) {
			e = calloc(1, sizeof(*e));
			if (e == NULL || (e->path = strndup(path, fe.len)) == NULL) {
				free(e);
				break;
			}
			HASH_ADD_KEYPTR(hh, remote, e->path, fe.len, e);
		}
		if (!(e->holders & (1ULL << node)))
			count_by_node[node]++;
		/* The latest report wins: a file rewritten on its home is
		 * fetched with its new size and mtime. */
		e->size = fe.size;
		e->mtime_ns = fe.mtime_ns;
		e->holders |= 1ULL << node;
	}
	pthread_mutex_unlock(&mu);
	return bad ? -1 : 0;
}

int peer_catalog_find(const char *path, uint64_t *size, int64_t *mtime_ns, uint64_t *holders)
{
	struct entry *e;
	pthread_mutex_lock(&mu);
	HASH_FIND_STR(remote, path, e);
	if (e) {
		*size = e->size;
		*mtime_ns = e->mtime_ns;
		*holders = e->holders;
	}
	pthread_mutex_unlock(&mu);
	return e ? 0 : -1;
}

int peer_catalog_local(const char *path, uint64_t *size, int64_t *mtime_ns)
{
	struct entry *e;
	pthread_mutex_lock(&mu);
	HASH_FIND_STR(local, path, e);
	if (e) {
		*size = e->size;
		*mtime_ns = e->mtime_ns;
	}
	pthread_mutex_unlock(&mu);
	return e ? 0 : -1;
}

long peer_catalog_count(int node)
{
	pthread_mutex_lock(&mu);
	long n = node < 0 ? nlocal : node < PEER_MAX_NODES ? count_by_node[node] : 0;
	pthread_mutex_unlock(&mu);
	return n;
}

void peer_catalog_foreach_remote(void (*fn)(void *ctx, const char *path, uint64_t size, int64_t mtime_ns), void *ctx)
{
	pthread_mutex_lock(&mu);
	for (struct entry *e = remote; e; e = e->hh.next) {
		struct entry *l;
		HASH_FIND_STR(local, e->path, l);
		if (l == NULL) /* a replica we hold is declared by the local scan */
			fn(ctx, e->path, e->size, e->mtime_ns);
	}
	pthread_mutex_unlock(&mu);
}
