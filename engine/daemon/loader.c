/* Loader threads: the only threads that read dataset files. Bounding them
 * bounds concurrent device requests whatever the number of clients. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <stdatomic.h>
#include <unistd.h>

#include "daemon.h"
#include "dlshim/scan.h"
#include "extent_read.h"

struct load_req {
	int fd;
	uint32_t slot;
	uint64_t size;
	int done, rc;
	pthread_cond_t cv;
	struct load_req *next;
	struct ahead *batch;  /* set for background loads: no one waits on cv */
	uint32_t index;
	int whole;            /* the batch's extent reads, then its other files */
};

/* A background batch: the last file loaded publishes them all. */
struct ahead {
	int job;
	uint32_t n;
	_Atomic uint32_t remaining;
	uint32_t item[DLSHIM_MAX_CHUNK], slot[DLSHIM_MAX_CHUNK];
	int fd[DLSHIM_MAX_CHUNK], rc[DLSHIM_MAX_CHUNK];
	uint64_t size[DLSHIM_MAX_CHUNK];
	struct load_req req[DLSHIM_MAX_CHUNK];
	struct load_req whole;
};

static void ahead_finish(struct ahead *a)
{
	for (uint32_t i = 0; i < a->n; i++)
		if (a->fd[i] >= 0)
			close(a->fd[i]);
	pthread_mutex_lock(&D.mu);
	for (uint32_t i = 0; i < a->n; i++) {
		uint64_t gen = dlshim_engine_load_done(D.eng, a->job, a->item[i], a->rc[i] == 0);
		if (gen)
			dlshim_engine_release(D.eng, a->job, a->slot[i], gen, 0, 0);
	}
	pthread_cond_broadcast(&D.loaded);
	pthread_mutex_unlock(&D.mu);
	free(a);
}

/* ---- extent reads of a batch (extent_read.c) ---- */

static pthread_mutex_t xs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct extent_read_stats xs;

void loader_extent_stats(struct extent_read_stats *out)
{
	pthread_mutex_lock(&xs_mu);
	*out = xs;
	pthread_mutex_unlock(&xs_mu);
}

/* Copy into slot[i] at `off`; the slots are pinned, unpublished and ours. */
static int put_in_slot(void *ctx, uint32_t i, uint64_t off, const void *buf, uint64_t len)
{
	const uint32_t *slot = ctx;
	struct iovec iov[64];
	while (len > 0) {
		int n = dlshim_engine_slot_iov(D.eng, slot[i], off, iov, 64);
		if (n <= 0)
			return -1;
		for (int k = 0; k < n && len > 0; k++) {
			size_t c = iov[k].iov_len < len ? iov[k].iov_len : len;
			memcpy(iov[k].iov_base, buf, c);
			buf = (const uint8_t *)buf + c;
			off += c;
			len -= c;
		}
	}
	return 0;
}

/* Load what extent reads can of a batch; rc[i] = 0 for those. */
static void extent_batch(const int *fd, const uint32_t *slot, const uint64_t *size, int *rc, uint32_t n)
{
	if (!D.cfg.extent_reads || n < 2)
		return;
	uint8_t done[DLSHIM_MAX_CHUNK];
	struct extent_read_stats st = {0};
	struct extent_sink sink = {put_in_slot, (void *)slot};
	if (n > DLSHIM_MAX_CHUNK || extent_read_batch(fd, size, n, &sink, done, &st) == 0)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (done[i])
			rc[i] = 0;
	pthread_mutex_lock(&xs_mu);
	xs.files += st.files;
	xs.file_bytes += st.file_bytes;
	xs.runs += st.runs;
	xs.device_bytes += st.device_bytes;
	pthread_mutex_unlock(&xs_mu);
}

static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER;
static struct load_req *q_head, *q_tail;

/* Read the whole file into the slot's blocks with preadv. The engine's iov
 * points into the shared segment; the slot is pinned and unpublished, so
 * no one else touches it meanwhile. */
/* Fault in the destination blocks with one call per contiguous run rather
 * than one page fault per page (a large share of a load's cost otherwise). */
static void populate(const struct iovec *iov, int n)
{
#ifdef MADV_POPULATE_WRITE
	for (int i = 0; i < n;) {
		uintptr_t lo = (uintptr_t)iov[i].iov_base & ~(uintptr_t)4095;
		uintptr_t hi = (uintptr_t)iov[i].iov_base + iov[i].iov_len;
		for (i++; i < n && (uintptr_t)iov[i].iov_base == hi; i++)
			hi += iov[i].iov_len;
		madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
	}
#else
	(void)iov;
	(void)n;
#endif
}

/* Tests make a load overlap a rewrite for certain: DLSHIM_TEST_LOAD_PAUSE_MS
 * pauses every load after its first read (never set in production). */
static long pause_ms;
static void read_pause_ms(void)
{
	const char *v = getenv("DLSHIM_TEST_LOAD_PAUSE_MS");
	pause_ms = v ? atol(v) : 0;
}

static long test_pause_ms(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT; /* loader threads ask at once */
	pthread_once(&once, read_pause_ms);
	return pause_ms;
}

/* Same size, mtime and ctime before and after the read: nothing wrote to
 * the file meanwhile (as far as its timestamps tell). */
static int same_version(const struct stat *a, const struct stat *b)
{
	return a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	       a->st_ctim.tv_nsec == b->st_ctim.tv_nsec && a->st_ino == b->st_ino;
}

int loader_load_now(int fd, uint32_t slot, uint64_t size)
{
	uint64_t off = 0;
	struct iovec iov[256];
	struct stat before, after;
	/* A file rewritten while it is read would be cached as a mix of two
	 * versions: compare its version before and after, and drop the load. */
	if (fstat(fd, &before) < 0 || (uint64_t)before.st_size != size || dlshim_fd_on_pseudo_fs(fd))
		return -1; /* a pseudo file's size says nothing of its bytes */
	while (off < size) {
		/* No engine lock: the chain of a slot being loaded is ours alone. */
		int n = dlshim_engine_slot_iov(D.eng, slot, off, iov, 256);
		if (n <= 0)
			return -1;
		populate(iov, n);
		ssize_t r = preadv(fd, iov, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1; /* error or the file shrank: never publish a short item */
		off += (uint64_t)r;
		if (test_pause_ms() > 0 && off < size) {
			dlog(DLSHIM_LOG_DEBUG, "test pause of a load at %llu of %llu bytes", (unsigned long long)off,
			     (unsigned long long)size);
			usleep((useconds_t)test_pause_ms() * 1000);
		}
	}
	if (fstat(fd, &after) < 0 || !same_version(&before, &after)) {
		dlog(DLSHIM_LOG_INFO, "a file changed while it was loaded; not cached");
		return -1;
	}
	/* The bytes now live in the shared cache: a second copy in the page
	 * cache would only take memory from it. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	return 0;
}

/* Start the kernel's reads of a whole batch at once (deep queue), before
 * the loader threads copy file by file; files already loaded (rc 0) skipped. */
static void prefetch(const int *fd, const int *rc, uint32_t n)
{
	if (n < 2)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (fd[i] >= 0 && rc[i] != 0)
			posix_fadvise(fd[i], 0, 0, POSIX_FADV_WILLNEED);
}

/* Append reqs to the loader queue (skipping those without a file). */
static uint32_t queue_reqs(struct load_req *r, uint32_t n)
{
	uint32_t queued = 0;
	pthread_mutex_lock(&q_mu);
	for (uint32_t i = 0; i < n; i++) {
		if (!r[i].whole && r[i].fd < 0)
			continue;
		r[i].next = NULL;
		if (q_tail)
			q_tail->next = &r[i];
		else
			q_head = &r[i];
		q_tail = &r[i];
		queued++;
	}
	pthread_cond_broadcast(&q_cv);
	pthread_mutex_unlock(&q_mu);
	return queued;
}

/* A background batch: extent reads where possible, then every other file
 * queued for the loader threads; the last one to finish publishes all. */
static void ahead_start(struct ahead *a)
{
	extent_batch(a->fd, a->slot, a->size, a->rc, a->n);
	uint32_t settled = 0;
	for (uint32_t i = 0; i < a->n; i++)
		if (a->rc[i] == 0 || a->fd[i] < 0) {
			a->req[i].fd = -1; /* not queued */
			settled++;
		}
	if (settled == a->n) {
		ahead_finish(a);
		return;
	}
	/* Count the settled ones down before queueing: a loader may finish
	 * the rest before this thread looks again. */
	atomic_fetch_sub(&a->remaining, settled);
	prefetch(a->fd, a->rc, a->n);
	queue_reqs(a->req, a->n);
}

static void *loader_main(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&q_mu);
		while (q_head == NULL)
			pthread_cond_wait(&q_cv, &q_mu);
		struct load_req *r = q_head;
		q_head = r->next;
		if (q_head == NULL)
			q_tail = NULL;
		pthread_mutex_unlock(&q_mu);
		if (r->whole) {
			ahead_start(r->batch);
			continue;
		}
		int rc = loader_load_now(r->fd, r->slot, r->size);
		if (r->batch) {
			struct ahead *a = r->batch;
			a->rc[r->index] = rc;
			if (atomic_fetch_sub(&a->remaining, 1) == 1)
				ahead_finish(a);
			continue;
		}
		pthread_mutex_lock(&q_mu);
		r->rc = rc;
		r->done = 1;
		pthread_cond_signal(&r->cv);
		pthread_mutex_unlock(&q_mu);
	}
	return NULL;
}

void loader_load_ahead(int job, const struct dlshim_open_result *res, const int *fds)
{
	struct ahead *a = calloc(1, sizeof(*a));
	if (a == NULL) {
		/* Cannot queue: give the slots back unpublished. */
		pthread_mutex_lock(&D.mu);
		for (uint32_t i = 0; i < res->nload; i++)
			dlshim_engine_load_done(D.eng, job, res->load_item[i], 0);
		pthread_cond_broadcast(&D.loaded);
		pthread_mutex_unlock(&D.mu);
		for (uint32_t i = 0; i < res->nload; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		return;
	}
	a->job = job;
	a->n = res->nload;
	atomic_init(&a->remaining, res->nload);
	for (uint32_t i = 0; i < a->n; i++) {
		a->item[i] = res->load_item[i];
		a->slot[i] = res->load_slot[i];
		a->fd[i] = fds[i];
		a->rc[i] = -1;
	}
	pthread_mutex_lock(&D.mu);
	for (uint32_t i = 0; i < a->n; i++) {
		a->size[i] = dlshim_engine_item_size(D.eng, a->item[i]);
		a->req[i] = (struct load_req){.fd = fds[i], .slot = a->slot[i], .batch = a, .index = i,
					      .size = a->size[i]};
	}
	pthread_mutex_unlock(&D.mu);
	if (D.cfg.extent_reads && a->n > 1) {
		/* A loader thread tries extent reads first (they block on the
		 * device; this thread answers clients). */
		a->whole = (struct load_req){.batch = a, .whole = 1};
		queue_reqs(&a->whole, 1);
		return;
	}
	ahead_start(a);
}

int loader_start(int nthreads)
{
	for (int i = 0; i < nthreads; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, loader_main, NULL) != 0)
			return -1;
		pthread_detach(t);
	}
	return 0;
}

/* A chunk: all its files are queued at once so the loader threads read
 * them in parallel (the device sees a batch, not one file at a time). */
void loader_load_batch(const int *fd, const uint32_t *slot, const uint64_t *size, int *rc, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		rc[i] = -1;
	extent_batch(fd, slot, size, rc, n);
	prefetch(fd, rc, n);
	struct load_req *r = calloc(n, sizeof(*r));
	if (r == NULL) {
		for (uint32_t i = 0; i < n; i++)
			rc[i] = -1;
		return;
	}
	pthread_mutex_lock(&q_mu);
	for (uint32_t i = 0; i < n; i++) {
		r[i] = (struct load_req){.fd = fd[i], .slot = slot[i], .size = size[i], .rc = rc[i]};
		pthread_cond_init(&r[i].cv, NULL);
		if (fd[i] < 0 || rc[i] == 0) {
			r[i].done = 1; /* no file, or read by extent */
			continue;
		}
		if (q_tail)
			q_tail->next = &r[i];
		else
			q_head = &r[i];
		q_tail = &r[i];
	}
	pthread_cond_broadcast(&q_cv);
	for (uint32_t i = 0; i < n; i++) {
		while (!r[i].done)
			pthread_cond_wait(&r[i].cv, &q_mu);
		rc[i] = r[i].rc;
	}
	pthread_mutex_unlock(&q_mu);
	for (uint32_t i = 0; i < n; i++)
		pthread_cond_destroy(&r[i].cv);
	free(r);
}
