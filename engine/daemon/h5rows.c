/* The coordinator's side of HDF5 row caching: remember each dataset's
 * plan (its row chunking, measured by h5files.c), pick the row to serve
 * (include/dlshim/rows.h) with the job's mapping, its holds and leases,
 * load row chunks (h5files.c reads them) on demand and ahead. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon.h"
#include "dlshim/rows.h"
#include "dlshim/shm.h"
#include "h5files.h"
#include "h5rows.h"

#define PLANS 64

struct plan {
	uint64_t dev, ino, size, chunk;
	int64_t mtime_ns;
	uint64_t dset_hash, nrows, row_bytes, chunk_rows;
	uint32_t redirect;
	int ok;                   /* 0: this dataset passes through */
	int used;
	uint64_t stamp;
};

/* The plans have their own lock: a request must not wait for a chunk
 * load's H5Dread (under h5files.c's lock) just to look its plan up. Order:
 * plan_mu, then the HDF5 lock, then D.mu. */
static pthread_mutex_t plan_mu = PTHREAD_MUTEX_INITIALIZER;
static struct plan plans[PLANS]; /* under plan_mu */
static uint64_t plan_clock;
static struct dlshim_rows *rows; /* under D.mu */

static int get_plan(const struct dlshim_msg_rows *m, const char *path, const char *dset, struct plan *out)
{
	uint64_t dh = dlshim_rows_name_hash(dset);
	pthread_mutex_lock(&plan_mu);
	struct plan *p = NULL, *old = &plans[0];
	for (int i = 0; i < PLANS; i++) {
		struct plan *q = &plans[i];
		if (q->used && q->dev == m->dev && q->ino == m->ino && q->size == m->size && q->mtime_ns == m->mtime_ns &&
		    q->dset_hash == dh && q->nrows == m->nrows && q->row_bytes == m->row_bytes && q->chunk == m->chunk &&
		    q->redirect == m->redirect) {
			p = q;
			break;
		}
		if (!q->used || q->stamp < old->stamp)
			old = q;
	}
	if (p == NULL) {
		p = old;
		memset(p, 0, sizeof(*p));
		struct dlshim_cache_stats cs;
		pthread_mutex_lock(&D.mu);
		dlshim_engine_cache_stats(D.eng, &cs);
		pthread_mutex_unlock(&D.mu);
		int ok = h5files_plan(path, dset, m, cs.capacity_bytes, &p->chunk_rows);
		if (ok < 0) {
			pthread_mutex_unlock(&plan_mu);
			return 0; /* not cached: the file may be changing */
		}
		p->ok = ok;
		p->dev = m->dev, p->ino = m->ino, p->size = m->size, p->mtime_ns = m->mtime_ns;
		p->dset_hash = dh, p->nrows = m->nrows, p->row_bytes = m->row_bytes, p->chunk = m->chunk;
		p->redirect = m->redirect;
		p->used = 1;
		if (!p->ok)
			dlog(DLSHIM_LOG_INFO, "%s:%s: rows pass through (layout or type not cached)", path, dset);
	}
	p->stamp = ++plan_clock;
	*out = *p;
	pthread_mutex_unlock(&plan_mu);
	return out->ok;
}

/* Read rows [first, first + count) into the slot being loaded. */
static int load_rows(const char *path, const char *dset, const struct dlshim_msg_rows *m, uint64_t first,
		     uint64_t count, uint32_t slot)
{
	uint64_t bytes = count * m->row_bytes;
	uint8_t *buf = malloc(bytes ? bytes : 1);
	if (buf == NULL)
		return -1;
	int rc = h5files_read_rows(path, dset, m, first, count, buf);
	if (rc == 0) {
		/* Scatter into the slot's block chain (stable while we hold its load). */
		uint64_t off = 0;
		while (off < bytes) {
			struct iovec iov[16];
			int n = dlshim_engine_slot_iov(D.eng, slot, off, iov, 16);
			if (n <= 0) {
				rc = -1;
				break;
			}
			for (int i = 0; i < n && off < bytes; i++) {
				size_t l = iov[i].iov_len < bytes - off ? iov[i].iov_len : bytes - off;
				memcpy(iov[i].iov_base, buf + off, l);
				off += l;
			}
		}
	} else {
		dlog(DLSHIM_LOG_WARN, "%s:%s: cannot read rows %llu..%llu; clients read them themselves", path, dset,
		     (unsigned long long)first, (unsigned long long)(first + count));
	}
	free(buf);
	return rc;
}

struct resident_ctx {
	const struct dlshim_msg_rows *m;
	uint64_t dset_hash, k;
};

/* The file's dataset with the same row count and the finest row chunks
 * (largest rows): its residency decides which rows are cheap to serve,
 * whichever dataset (inputs or labels) asks first. */
static void primary(const struct plan *p, uint64_t *hash, uint64_t *k)
{
	*hash = p->dset_hash;
	*k = p->chunk_rows;
	pthread_mutex_lock(&plan_mu);
	for (int i = 0; i < PLANS; i++) {
		const struct plan *q = &plans[i];
		if (q->used && q->ok && q->dev == p->dev && q->ino == p->ino && q->mtime_ns == p->mtime_ns &&
		    q->nrows == p->nrows && q->chunk == p->chunk && q->redirect == p->redirect && q->chunk_rows < *k) {
			*hash = q->dset_hash;
			*k = q->chunk_rows;
		}
	}
	pthread_mutex_unlock(&plan_mu);
}

/* Called under D.mu by the row mapping. */
static int chunk_resident(void *ctx, uint64_t first, uint64_t n)
{
	(void)n;
	const struct resident_ctx *c = ctx;
	struct dlshim_file_id id;
	dlshim_rows_chunk_id(c->m->dev, c->m->ino, c->m->mtime_ns, c->dset_hash, c->k, first / c->k, 0, &id);
	uint32_t it = dlshim_engine_find_item(D.eng, id.dev, id.ino);
	return it != DLSHIM_NO_ITEM &&
	       (dlshim_engine_item_resident(D.eng, it) || dlshim_engine_item_loading(D.eng, it));
}

/* Called under D.mu by the row mappings: their holds are part of the
 * chunk item's RefCnt key. */
static int chunk_hold(void *ctx, int job, const struct dlshim_file_id *id, int how)
{
	(void)ctx;
	if (how < 0)
		dlshim_engine_item_spent(D.eng, job, id->dev, id->ino);
	return dlshim_engine_item_hold(D.eng, id->dev, id->ino, how > 0 ? 1 : -1);
}

/* Open row chunk [first, first + count) for `job`, loading it (or waiting
 * for its load) as needed. Called and returns with D.mu held; res->kind is
 * HIT (pinned) or PASS. A redirect job's chunks are needed by its
 * mappings' holds (DLSHIM_OPEN_F_HELD), not by opens; a chunk new to the
 * cache is held by the mappings that need it before anything can evict
 * it. `k`: rows per chunk of the dataset. */
static void open_chunk(int job, const struct dlshim_msg_rows *m, const char *path, const char *dset,
		       const struct dlshim_file_id *id, uint64_t first, uint64_t count, uint64_t k, unsigned flags,
		       struct dlshim_open_result *res)
{
	if (m->redirect == DLSHIM_REDIRECT_ANY)
		flags |= DLSHIM_OPEN_F_HELD;
	daemon_engine_open(job, id, flags, res);
	if (res->kind == DLSHIM_OPEN_LOAD && (flags & DLSHIM_OPEN_F_HELD))
		dlshim_rows_chunk_cached(rows, m->dev, m->ino, m->nrows, m->mtime_ns, dlshim_rows_name_hash(dset), k,
					 first / k);
	if (res->kind == DLSHIM_OPEN_LOAD) {
		pthread_mutex_unlock(&D.mu);
		int ok = load_rows(path, dset, m, first, count, res->slot) == 0;
		pthread_mutex_lock(&D.mu);
		uint64_t gen = dlshim_engine_load_done(D.eng, job, res->item, ok);
		pthread_cond_broadcast(&D.loaded);
		res->kind = gen ? DLSHIM_OPEN_HIT : DLSHIM_OPEN_PASS;
		res->gen = gen;
	}
}

/* Load-ahead of one row chunk at a time (all jobs together): while the
 * workers consume a chunk, the next one is read, so a redirected read
 * rarely waits for storage. */
static atomic_int ahead_busy;

struct ahead {
	int job;
	struct dlshim_msg_rows m;
	uint64_t k;
	struct dlshim_file_id id;
	uint64_t first, count;
	char *path, *dset;
};

static void *ahead_main(void *arg)
{
	struct ahead *a = arg;
	struct dlshim_open_result res;
	pthread_mutex_lock(&D.mu);
	open_chunk(a->job, &a->m, a->path, a->dset, &a->id, a->first, a->count, a->k,
		   DLSHIM_OPEN_F_AHEAD | DLSHIM_OPEN_F_SPARE, &res);
	if (res.kind == DLSHIM_OPEN_HIT)
		dlshim_engine_release(D.eng, a->job, res.slot, res.gen, 0, 0); /* nothing copied */
	pthread_mutex_unlock(&D.mu);
	free(a->path);
	free(a->dset);
	free(a);
	atomic_store(&ahead_busy, 0);
	return NULL;
}

/* Called under D.mu. */
static void ahead_start(int job, const struct dlshim_msg_rows *m, const char *path, const char *dset,
			const struct plan *p, uint64_t chunk)
{
	if (atomic_exchange(&ahead_busy, 1))
		return;
	struct ahead *a = calloc(1, sizeof(*a));
	pthread_t t;
	pthread_attr_t at;
	if (a && (a->path = strdup(path)) && (a->dset = strdup(dset)) && pthread_attr_init(&at) == 0) {
		a->job = job;
		a->m = *m;
		a->k = p->chunk_rows;
		a->first = chunk * p->chunk_rows;
		a->count = m->nrows - a->first < p->chunk_rows ? m->nrows - a->first : p->chunk_rows;
		dlshim_rows_chunk_id(m->dev, m->ino, m->mtime_ns, p->dset_hash, p->chunk_rows, chunk,
				     a->count * m->row_bytes, &a->id);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		int rc = pthread_create(&t, &at, ahead_main, a);
		pthread_attr_destroy(&at);
		if (rc == 0)
			return;
	}
	if (a) {
		free(a->path);
		free(a->dset);
	}
	free(a);
	atomic_store(&ahead_busy, 0);
}

/* The connection's lease memory, created on first use. Called under D.mu. */
static int lease_get(struct h5rows_conn *hc)
{
	if (hc->l)
		return 0;
	size_t len = ((sizeof(struct dlshim_rows_lease_shm) + 4095) / 4096) * 4096;
	int fd = memfd_create("dlshim-lease", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)len) == 0)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return -1;
	}
	hc->l = dlshim_rows_lease_new(rows, p);
	if (hc->l == NULL) {
		munmap(p, len);
		close(fd);
		return -1;
	}
	hc->shm = p;
	hc->fd = fd;
	hc->sent = 0;
	return 0;
}

void h5rows_conn_end(struct h5rows_conn *hc)
{
	if (hc->l == NULL)
		return;
	pthread_mutex_lock(&D.mu);
	dlshim_rows_lease_free(rows, hc->l);
	pthread_mutex_unlock(&D.mu);
	munmap(hc->shm, ((sizeof(struct dlshim_rows_lease_shm) + 4095) / 4096) * 4096);
	close(hc->fd);
	memset(hc, 0, sizeof(*hc));
}

/* Jobs told that they read only part of a file's rows (once per job). */
static uint8_t partial_told[DLSHIM_ENGINE_MAX_JOBS];

/* An epoch of the job's mapping ended with `unasked` rows that no dataset
 * asked for: they were served for other rows. More than a tenth of the file
 * (drop_last leaves out less than a batch) means the job reads part of the
 * file, a split by index or a subset, and redirect serves it rows of the
 * rest: say so in the log and, once per job, to the job. Called under D.mu. */
static void partial_epoch(int job, const char *jn, const struct dlshim_msg_rows *m, const char *path,
			  const char *dset, int64_t unasked, struct dlshim_msg_rows_r *r)
{
	/* A job spanning nodes reads part of each file on each node by design
	 * (its rows are decided per node: docs/design.md, limitations). */
	if (unasked < 16 || (uint64_t)unasked * 10 <= m->nrows || job < 0 || job >= DLSHIM_ENGINE_MAX_JOBS ||
	    partial_told[job] || D.job_spans[job])
		return;
	partial_told[job] = 1;
	r->flags |= DLSHIM_ROWS_R_PARTIAL;
	dlog(DLSHIM_LOG_WARN,
	     "job %s: %s:%s: %lld of %llu rows were never asked for in an epoch; with DLSHIM_REDIRECT=any the "
	     "job is served rows of the whole file, those included (a split by index or a subset of the file "
	     "is not kept)",
	     jn ? jn : "?", path, dset, (long long)unasked, (unsigned long long)m->nrows);
}

/* Rows per lease: half a row chunk (a worker's lease then covers what the
 * chunk load brings in for it), at least 8. */
static uint32_t lease_want(uint64_t k)
{
	uint64_t w = k / 2 < 8 ? 8 : k / 2;
	return w > DLSHIM_LEASE_ROWS ? DLSHIM_LEASE_ROWS : (uint32_t)w;
}

void h5rows_serve(int job, const struct dlshim_msg_rows *m, const char *path, const char *dset,
		  struct dlshim_msg_rows_r *r, struct h5rows_conn *hc, int *pass_fd)
{
	memset(r, 0, sizeof(*r));
	*pass_fd = -1;
	r->status = DLSHIM_OPEN_R_PASS;
	struct plan p;
	if (m->row >= m->nrows || !get_plan(m, path, dset, &p))
		return;
	uint64_t k = p.chunk_rows, served = m->row;
	struct resident_ctx rc = {m, p.dset_hash, k};
	int redirect = m->redirect == DLSHIM_REDIRECT_ANY && !(m->flags & DLSHIM_ROWS_F_LEASED);
	if (m->redirect == DLSHIM_REDIRECT_ANY)
		primary(&p, &rc.dset_hash, &rc.k);
	pthread_mutex_lock(&D.mu);
	if (rows == NULL && (rows = dlshim_rows_create()) != NULL)
		dlshim_rows_set_hold(rows, chunk_hold, NULL);
	const char *jn = dlshim_engine_job_name(D.eng, job);
	uint64_t jk = dlshim_rows_name_hash(jn ? jn : "");
	int64_t j = -1;
	if (m->redirect == DLSHIM_REDIRECT_ANY) {
		/* This dataset's chunks, and the primary's, are held while the
		 * epoch has rows of them to serve (a read of a row already decided
		 * too: a sample's second dataset may only ever read those). */
		dlshim_rows_bind(rows, job, jk, m->dev, m->ino, m->nrows, m->mtime_ns, p.dset_hash, k);
		if (rc.dset_hash != p.dset_hash)
			dlshim_rows_bind(rows, job, jk, m->dev, m->ino, m->nrows, m->mtime_ns, rc.dset_hash, rc.k);
	}
	if (redirect) {
		uint64_t e0 = dlshim_rows_epochs_started(rows);
		j = dlshim_rows_map(rows, job, jk, m->dev, m->ino, m->nrows, p.dset_hash, m->row, rc.k, chunk_resident,
				    &rc);
		/* Published before any mapping of the new epoch leaves: clients
		 * drop the mappings they remember. */
		if (dlshim_rows_epochs_started(rows) != e0) {
			dlshim_engine_rows_epoch_bump(D.eng);
			int64_t ep = dlshim_rows_epoch(rows, job, jk, m->dev, m->ino, m->nrows);
			if (ep > 0)
				dlshim_engine_job_rows_epoch(D.eng, job, (uint32_t)ep);
			partial_epoch(job, jn, m, path, dset, dlshim_rows_unasked(rows, job, jk, m->dev, m->ino, m->nrows),
				      r);
		}
		if (j >= 0)
			served = (uint64_t)j;
		/* Only the dataset whose residency steers the mapping reads ahead. */
		int64_t next = j >= 0 && rc.dset_hash == p.dset_hash
				       ? dlshim_rows_ahead(rows, job, jk, m->dev, m->ino, m->nrows, k, served,
							   chunk_resident, &rc)
				       : -1;
		if (next >= 0)
			ahead_start(job, m, path, dset, &p, (uint64_t)next);
	}
	uint64_t first = served / k * k, count = m->nrows - first < k ? m->nrows - first : k;
	struct dlshim_file_id id;
	dlshim_rows_chunk_id(m->dev, m->ino, m->mtime_ns, p.dset_hash, k, first / k, count * m->row_bytes, &id);
	struct dlshim_open_result *res = malloc(sizeof(*res));
	if (res == NULL) {
		pthread_mutex_unlock(&D.mu);
		return;
	}
	open_chunk(job, m, path, dset, &id, first, count, k, 0, res);
	/* The next rows this client will serve, decided now (after the served
	 * row's chunk is in, so they come from it first): it takes them from
	 * shared memory without asking. */
	if (redirect && j >= 0 && (m->flags & DLSHIM_ROWS_F_LEASE) && hc && lease_get(hc) == 0) {
		int64_t next = -1;
		r->lease_count = dlshim_rows_lease_fill(rows, hc->l, job, jk, m->dev, m->ino, m->nrows, lease_want(rc.k),
							rc.k, chunk_resident, &rc, &next);
		r->flags |= DLSHIM_ROWS_R_LEASE;
		if (!hc->sent) {
			*pass_fd = hc->fd;
			hc->sent = 1;
		}
		if (next >= 0 && rc.dset_hash == p.dset_hash)
			ahead_start(job, m, path, dset, &p, (uint64_t)next);
	}
	pthread_mutex_unlock(&D.mu);
	r->served = served; /* also on PASS: the client then reads this row itself */
	if (res->kind == DLSHIM_OPEN_HIT) {
		/* Unpinned at once and the client's copy counted now: a row read
		 * costs one message, and a slot reused before the copy only sends
		 * the client to HDF5 (generation check). */
		uint64_t take = first + count - served;
		if (take > m->count)
			take = m->count;
		pthread_mutex_lock(&D.mu);
		dlshim_engine_release(D.eng, job, res->slot, res->gen, take * m->row_bytes, 0);
		pthread_mutex_unlock(&D.mu);
		r->status = DLSHIM_OPEN_R_HIT;
		r->slot = res->slot;
		r->gen = res->gen;
		r->size = count * m->row_bytes;
		r->first = first;
		r->count = count;
		r->chunk_rows = k;
	}
	free(res);
}

void h5rows_job_end(int job)
{
	if (job >= 0 && job < DLSHIM_ENGINE_MAX_JOBS)
		partial_told[job] = 0; /* the id may be reused by another job */
	if (rows)
		dlshim_rows_job_end(rows, job);
}
