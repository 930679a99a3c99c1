/* The requester side of a remote fetch: a local client opened a path under
 * a root that is not on this node's storage. If a peer is home for it, the
 * file comes into our own cache by RMA (once: later opens are local hits)
 * and the client gets a read-only descriptor with the file's bytes (so
 * fstat, mmap and anything the shim does not intercept see the same file)
 * plus the slot to read from. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "dlshim/shm.h"
#include "peer.h"

static pthread_cond_t slots_cv = PTHREAD_COND_INITIALIZER;

/* At most PEER_INFLIGHT_PER_CLIENT fetches per client process: the bound
 * on the incast one job can cause (the rdma design's scheduling). */
static void inflight_enter(struct session *s)
{
	pthread_mutex_lock(&D.mu);
	while (s->remote_inflight >= PEER_INFLIGHT_PER_CLIENT)
		pthread_cond_wait(&slots_cv, &D.mu);
	s->remote_inflight++;
	pthread_mutex_unlock(&D.mu);
}

static void inflight_leave(struct session *s)
{
	pthread_mutex_lock(&D.mu);
	s->remote_inflight--;
	pthread_cond_broadcast(&slots_cv);
	pthread_mutex_unlock(&D.mu);
}

int remote_fetch(struct session *s, struct peer_item *it, int n, char *why, size_t whylen)
{
	inflight_enter(s);
	int rc = peer_fetch_items(it, n, why, whylen);
	inflight_leave(s);
	return rc;
}

int remote_open(struct session *s, const char *path, struct dlshim_msg_open_r *r, int *sfd)
{
	*sfd = -1;
	memset(r, 0, sizeof(*r));
	r->status = DLSHIM_OPEN_R_ABSENT;
	uint64_t size, holders;
	int64_t mtime;
	size_t pl = strlen(path);
	if (!peer_enabled() || !dlshim_config_path_routed(&D.cfg, path, pl) ||
	    peer_catalog_find(path, &size, &mtime, &holders) < 0)
		return -1;
	/* A remote file has no local ctime: its version is (size, mtime) as its home listed it. */
	struct dlshim_file_id id = {PEER_REMOTE_DEV, peer_path_hash(path), size, mtime, 0};
	struct dlshim_open_result *res = malloc(sizeof(*res));
	if (res == NULL)
		return -1;
	(void)holders;
	pthread_mutex_lock(&D.mu);
	unsigned flags = 0;
	for (;;) {
		dlshim_engine_open(D.eng, s->job, &id, flags, res);
		if (res->kind != DLSHIM_OPEN_WAIT)
			break;
		flags = DLSHIM_OPEN_F_RETRY;
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 30; /* another client is fetching it; a fetch times out before this */
		if (pthread_cond_timedwait(&D.loaded, &D.mu, &dl) == ETIMEDOUT) {
			res->kind = DLSHIM_OPEN_PASS;
			break;
		}
	}
	pthread_mutex_unlock(&D.mu);
	int ok = res->kind == DLSHIM_OPEN_HIT;
	uint64_t gen = res->gen;
	if (ok)
		peer_count_remote(1, 0, 1);
	if (res->kind == DLSHIM_OPEN_LOAD) {
		char why[300];
		int niov = (int)((size + DLSHIM_BLOCK_SIZE - 1) / DLSHIM_BLOCK_SIZE) + 1;
		struct iovec *iov = calloc((size_t)niov, sizeof(*iov));
		int n = 0;
		for (uint64_t off = 0; iov && off < size;) {
			int k = dlshim_engine_slot_iov(D.eng, res->slot, off, iov + n, niov - n);
			if (k <= 0)
				break;
			for (int i = n; i < n + k; i++)
				off += iov[i].iov_len;
			n += k;
		}
		struct peer_item it = {.path = path, .size = size, .mtime_ns = mtime, .iov = iov, .niov = n,
				       .item = res->item};
		int rc = iov ? remote_fetch(s, &it, 1, why, sizeof(why)) : -1;
		free(iov);
		if (rc < 0)
			dlog(DLSHIM_LOG_WARN, "peers: %s is not on this node and cannot be fetched: %s", path,
			     iov ? why : "out of memory");
		pthread_mutex_lock(&D.mu);
		gen = dlshim_engine_load_done(D.eng, s->job, res->item, rc == 0);
		pthread_cond_broadcast(&D.loaded);
		pthread_mutex_unlock(&D.mu);
		ok = gen != 0;
	}
	int fd = ok ? slot_memfd(res->slot, gen, size, mtime) : -1;
	if (ok && fd < 0) {
		pthread_mutex_lock(&D.mu);
		dlshim_engine_release(D.eng, s->job, res->slot, gen, 0, 0);
		pthread_mutex_unlock(&D.mu);
	}
	if (fd < 0) {
		free(res);
		return -1;
	}
	r->status = DLSHIM_OPEN_R_HIT;
	r->item = res->item;
	r->slot = res->slot;
	r->gen = gen;
	r->size = size;
	r->flags = DLSHIM_OPEN_R_F_FD;
	*sfd = fd;
	free(res);
	return 0;
}
