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

/* Remote files have no local (dev, ino): this device number, never a real
 * one, and a hash of the path stand in for them in the engine's catalog. */
#define REMOTE_DEV 0xd15d000000000000ULL

static pthread_cond_t slots_cv = PTHREAD_COND_INITIALIZER;

static uint64_t path_hash(const char *p)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	return h;
}

/* A private, sealed, read-only descriptor holding the slot's bytes. */
static int make_fd(uint32_t slot, uint64_t gen, uint64_t size, int64_t mtime_ns)
{
	/* A view of our own segment (attach only validates and records). */
	struct dlshim_shm_view view;
	if (dlshim_shm_attach(D.shm_base, D.shm_len, &view) < 0)
		return -1;
	int fd = memfd_create("dlshim-remote", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -1;
	static __thread char buf[256 * 1024];
	struct dlshim_shm_cursor cur = {0};
	uint64_t off = 0;
	while (off < size) {
		ssize_t n = dlshim_shm_read(&view, slot, gen, off, buf, sizeof(buf), &cur);
		if (n <= 0 || pwrite(fd, buf, (size_t)n, (off_t)off) != n) {
			close(fd);
			return -1;
		}
		off += (uint64_t)n;
	}
	struct timespec ts[2] = {{0, UTIME_OMIT}, {mtime_ns / 1000000000LL, mtime_ns % 1000000000LL}};
	futimens(fd, ts); /* the home's mtime, for programs that look at it */
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	int ro = open(proc, O_RDONLY | O_CLOEXEC);
	close(fd);
	return ro;
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
	struct dlshim_file_id id = {REMOTE_DEV, path_hash(path), size, mtime, 0};
	struct dlshim_open_result *res = malloc(sizeof(*res));
	if (res == NULL)
		return -1;
	pthread_mutex_lock(&D.mu);
	/* At most PEER_INFLIGHT_PER_CLIENT fetches per client process. */
	while (s->remote_inflight >= PEER_INFLIGHT_PER_CLIENT)
		pthread_cond_wait(&slots_cv, &D.mu);
	s->remote_inflight++;
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
		int rc = iov ? peer_fetch(path, size, mtime, holders, iov, n, why, sizeof(why)) : -1;
		free(iov);
		if (rc < 0)
			dlog(DLSHIM_LOG_WARN, "peers: %s is not on this node and cannot be fetched: %s", path,
			     iov ? why : "out of memory");
		peer_count_remote(rc == 0, size, 0);
		pthread_mutex_lock(&D.mu);
		gen = dlshim_engine_load_done(D.eng, s->job, res->item, rc == 0);
		pthread_cond_broadcast(&D.loaded);
		pthread_mutex_unlock(&D.mu);
		ok = gen != 0;
	}
	int fd = ok ? make_fd(res->slot, gen, size, mtime) : -1;
	pthread_mutex_lock(&D.mu);
	if (ok && fd < 0)
		dlshim_engine_release(D.eng, s->job, res->slot, gen, 0, 0);
	s->remote_inflight--;
	pthread_cond_broadcast(&slots_cv);
	pthread_mutex_unlock(&D.mu);
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
