/* Loader threads: the only threads that read dataset files. Bounding them
 * bounds concurrent device requests whatever the number of clients. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <stdatomic.h>
#include <unistd.h>

#include "daemon.h"

struct load_req {
	int fd;
	uint32_t slot;
	uint64_t size;
	int done, rc;
	pthread_cond_t cv;
	struct load_req *next;
	struct ahead *batch;  /* set for background loads: no one waits on cv */
	uint32_t index;
};

/* A background batch: the last file loaded publishes them all. */
struct ahead {
	int job;
	uint32_t n;
	_Atomic uint32_t remaining;
	uint32_t item[DLSHIM_MAX_CHUNK], slot[DLSHIM_MAX_CHUNK];
	int fd[DLSHIM_MAX_CHUNK], rc[DLSHIM_MAX_CHUNK];
	struct load_req req[DLSHIM_MAX_CHUNK];
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

int loader_load_now(int fd, uint32_t slot, uint64_t size)
{
	uint64_t off = 0;
	struct iovec iov[256];
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
	}
	/* The bytes now live in the shared cache: a second copy in the page
	 * cache would only take memory from it. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	return 0;
}

/* Start the kernel's reads of a whole batch at once (deep queue), before
 * the loader threads copy file by file. */
static void prefetch(const int *fd, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (fd[i] >= 0)
			posix_fadvise(fd[i], 0, 0, POSIX_FADV_WILLNEED);
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
	prefetch(fds, res->nload);
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
	for (uint32_t i = 0; i < a->n; i++)
		a->req[i] = (struct load_req){.fd = fds[i], .slot = a->slot[i], .batch = a, .index = i,
					      .size = dlshim_engine_item_size(D.eng, a->item[i])};
	pthread_mutex_unlock(&D.mu);
	uint32_t skipped = 0;
	pthread_mutex_lock(&q_mu);
	for (uint32_t i = 0; i < a->n; i++) {
		if (fds[i] < 0) {
			skipped++;
			continue;
		}
		if (q_tail)
			q_tail->next = &a->req[i];
		else
			q_head = &a->req[i];
		q_tail = &a->req[i];
	}
	pthread_cond_broadcast(&q_cv);
	pthread_mutex_unlock(&q_mu);
	/* Files that could not be opened count as done (failed) right away. */
	if (skipped && atomic_fetch_sub(&a->remaining, skipped) == skipped)
		ahead_finish(a);
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
	if (n > 1)
		prefetch(fd, n);
	struct load_req *r = calloc(n, sizeof(*r));
	if (r == NULL) {
		for (uint32_t i = 0; i < n; i++)
			rc[i] = -1;
		return;
	}
	pthread_mutex_lock(&q_mu);
	for (uint32_t i = 0; i < n; i++) {
		r[i] = (struct load_req){.fd = fd[i], .slot = slot[i], .size = size[i], .rc = -1};
		pthread_cond_init(&r[i].cv, NULL);
		if (fd[i] < 0) {
			r[i].done = 1;
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
