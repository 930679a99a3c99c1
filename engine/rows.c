/* Row chunk identities and the per-job row mapping for HDF5 redirection
 * (include/dlshim/rows.h). The mapping follows redox's local protocol at
 * row granularity: serve the requested row if it is resident and unused,
 * else any resident unused row, else the requested row (loading its chunk
 * brings its neighbours in for the next requests). A mapping holds every
 * chunk that still has unused rows in its epoch (the caller's hold
 * function, the cache's RefCnt), so rows resident at an epoch's end stay
 * until the next epoch has served them. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dlshim/rows.h"

#define MAX_DSETS 16
#define UNMAPPED UINT32_MAX

uint64_t dlshim_rows_name_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
	return h;
}

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void dlshim_rows_chunk_id(uint64_t dev, uint64_t ino, int64_t mtime_ns, uint64_t dset_hash, uint64_t chunk_rows,
			  uint64_t chunk, uint64_t bytes, struct dlshim_file_id *out)
{
	/* The chunking is part of the identity: two chunkings of one dataset
	 * are different items, never a short read of each other. */
	uint64_t h = mix(ino ^ mix(dset_hash ^ mix(chunk_rows * 0x9e3779b97f4a7c15ULL ^ chunk)));
	out->dev = dev | DLSHIM_ROWS_DEV_BIT;
	out->ino = h;
	out->size = bytes;
	out->mtime_ns = mtime_ns;
	out->ctime_ns = 0; /* a row chunk's version is its file's (dev, ino, mtime), checked at load */
}

struct dset_req {
	uint64_t key;
	uint8_t *asked;           /* rows this dataset asked for this epoch */
	uint64_t nasked;
};

/* The row chunk items of one dataset of the file that a mapping holds:
 * those with rows it has not served this epoch. */
struct hbind {
	uint64_t dset, k;         /* dataset name hash, rows per chunk */
	int64_t mtime;            /* file version */
	uint32_t *unused;         /* per chunk: rows not served this epoch (leased ones too) */
	uint8_t *held;            /* per chunk: we hold its item */
};

struct rmap {
	int job;
	uint64_t job_key, dev, ino, n;
	uint64_t epoch;
	uint8_t *used;            /* rows served this epoch */
	uint32_t *to;             /* requested row -> served row this epoch */
	uint64_t cursor;          /* where the last served row was: keep going from there */
	uint64_t nmapped;         /* rows mapped this epoch */
	uint64_t nconsumed;       /* rows used and no longer out in a lease this epoch */
	uint64_t nleased;         /* rows out in leases */
	int64_t unasked;          /* rows no dataset asked for in the last finished epoch; -1 before */
	int ndsets;
	struct dset_req d[MAX_DSETS];
	int nb;
	struct hbind b[MAX_DSETS];
};

/* The coordinator's own record of a lease: what it handed out is taken
 * from here, never from the shared area. */
struct dlshim_rows_lease {
	struct dlshim_rows_lease_shm *shm;
	struct rmap *m;           /* the mapping its rows belong to, or NULL */
	uint32_t n;
	uint32_t served[DLSHIM_LEASE_ROWS];
	uint8_t out[DLSHIM_LEASE_ROWS]; /* 1: neither taken (recorded) nor given back yet */
};

struct dlshim_rows {
	struct rmap **m;
	size_t n, cap;
	uint64_t epochs;          /* epochs started, all maps together */
	struct dlshim_rows_lease **l;
	size_t nl, lcap;
	dlshim_rows_hold_fn hold;
	void *hold_ctx;
};

static int bit(const uint8_t *b, uint64_t i) { return (b[i >> 3] >> (i & 7)) & 1; }
static void set_bit(uint8_t *b, uint64_t i) { b[i >> 3] |= (uint8_t)(1u << (i & 7)); }
static void clear_bit(uint8_t *b, uint64_t i) { b[i >> 3] &= (uint8_t)~(1u << (i & 7)); }
static struct dset_req *dset(struct rmap *m, uint64_t key);

struct dlshim_rows *dlshim_rows_create(void) { return calloc(1, sizeof(struct dlshim_rows)); }

static void rmap_free(struct rmap *m)
{
	for (int i = 0; i < m->ndsets; i++)
		free(m->d[i].asked);
	free(m->used);
	free(m->to);
	free(m);
}

void dlshim_rows_set_hold(struct dlshim_rows *r, dlshim_rows_hold_fn fn, void *ctx)
{
	r->hold = fn;
	r->hold_ctx = ctx;
}

static uint64_t bchunks(const struct rmap *m, const struct hbind *b) { return (m->n + b->k - 1) / b->k; }

static uint32_t chunk_len(const struct rmap *m, const struct hbind *b, uint64_t c)
{
	uint64_t first = c * b->k;
	return (uint32_t)(m->n - first < b->k ? m->n - first : b->k);
}

/* Hold chunk c while some row of it is unused this epoch, else let go. */
static void bsync(struct dlshim_rows *r, const struct rmap *m, struct hbind *b, uint64_t c)
{
	int want = b->unused[c] > 0, have = bit(b->held, c);
	if (r->hold == NULL || want == have)
		return;
	struct dlshim_file_id id;
	dlshim_rows_chunk_id(m->dev, m->ino, b->mtime, b->dset, b->k, c, 0, &id);
	if (want) {
		if (r->hold(r->hold_ctx, m->job, &id, +1))
			set_bit(b->held, c);
	} else {
		r->hold(r->hold_ctx, m->job, &id, -1); /* every row served: consumed this epoch */
		clear_bit(b->held, c);
	}
}

/* Give back a binding's holds and forget it. */
static void unbind(struct dlshim_rows *r, const struct rmap *m, struct hbind *b)
{
	for (uint64_t c = 0; b->held && c < bchunks(m, b); c++)
		if (bit(b->held, c)) {
			struct dlshim_file_id id;
			dlshim_rows_chunk_id(m->dev, m->ino, b->mtime, b->dset, b->k, c, 0, &id);
			if (r->hold)
				r->hold(r->hold_ctx, m->job, &id, 0); /* given back unconsumed */
		}
	free(b->unused);
	free(b->held);
	memset(b, 0, sizeof(*b));
}

static void unbind_all(struct dlshim_rows *r, struct rmap *m)
{
	for (int i = 0; i < m->nb; i++)
		unbind(r, m, &m->b[i]);
	m->nb = 0;
}

/* Row j of the epoch is served (the client has it or had it), so its
 * chunks need it no more: they may change hands. A leased row still needs
 * its chunk until the client takes it. */
static void row_spent(struct dlshim_rows *r, struct rmap *m, uint64_t j)
{
	for (int i = 0; i < m->nb; i++) {
		struct hbind *b = &m->b[i];
		uint64_t c = j / b->k;
		if (b->unused[c] > 0 && --b->unused[c] == 0)
			bsync(r, m, b, c);
	}
}

void dlshim_rows_destroy(struct dlshim_rows *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->n; i++)
		rmap_free(r->m[i]);
	for (size_t i = 0; i < r->nl; i++)
		free(r->l[i]);
	free(r->m);
	free(r->l);
	free(r);
}

void dlshim_rows_job_end(struct dlshim_rows *r, int job)
{
	for (size_t i = 0; i < r->n;)
		if (r->m[i]->job == job) {
			for (size_t k = 0; k < r->nl; k++)
				if (r->l[k]->m == r->m[i])
					r->l[k]->m = NULL;
			unbind_all(r, r->m[i]);
			rmap_free(r->m[i]);
			r->m[i] = r->m[--r->n];
		} else {
			i++;
		}
}

static struct rmap *find(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino, uint64_t n)
{
	for (size_t i = 0; i < r->n; i++) {
		struct rmap *m = r->m[i];
		if (m->job == job && m->job_key == job_key && m->dev == dev && m->ino == ino && m->n == n)
			return m;
	}
	return NULL;
}

static struct rmap *get(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino, uint64_t n)
{
	struct rmap *m = find(r, job, job_key, dev, ino, n);
	if (m)
		return m;
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 8;
		struct rmap **v = realloc(r->m, cap * sizeof(*v));
		if (v == NULL)
			return NULL;
		r->m = v;
		r->cap = cap;
	}
	m = calloc(1, sizeof(*m));
	if (m == NULL)
		return NULL;
	m->used = calloc((n + 7) / 8, 1);
	m->to = malloc(n * sizeof(uint32_t));
	if (m->used == NULL || m->to == NULL) {
		rmap_free(m);
		return NULL;
	}
	memset(m->to, 0xff, n * sizeof(uint32_t));
	m->job = job;
	m->job_key = job_key;
	m->dev = dev;
	m->ino = ino;
	m->n = n;
	m->unasked = -1;
	r->m[r->n++] = m;
	return m;
}

static struct dset_req *dset(struct rmap *m, uint64_t key)
{
	for (int i = 0; i < m->ndsets; i++)
		if (m->d[i].key == key)
			return &m->d[i];
	if (m->ndsets == MAX_DSETS)
		return NULL;
	struct dset_req *d = &m->d[m->ndsets];
	d->asked = calloc((m->n + 7) / 8, 1);
	if (d->asked == NULL)
		return NULL;
	d->key = key;
	d->nasked = 0;
	m->ndsets++;
	return d;
}

static void new_epoch(struct dlshim_rows *r, struct rmap *m)
{
	uint64_t asked = 0;
	for (int i = 0; i < m->ndsets; i++)
		asked = m->d[i].nasked > asked ? m->d[i].nasked : asked;
	m->unasked = (int64_t)(m->n - asked);
	size_t bytes = (m->n + 7) / 8;
	memset(m->used, 0, bytes);
	memset(m->to, 0xff, m->n * sizeof(uint32_t));
	for (int i = 0; i < m->ndsets; i++) {
		memset(m->d[i].asked, 0, bytes);
		m->d[i].nasked = 0;
	}
	m->nmapped = 0;
	m->nconsumed = 0;
	m->epoch++;
	for (int i = 0; i < m->nb; i++) { /* every row is needed again */
		struct hbind *b = &m->b[i];
		for (uint64_t c = 0; c < bchunks(m, b); c++) {
			b->unused[c] = chunk_len(m, b, c);
			bsync(r, m, b, c);
		}
	}
}

/* First unused row in [first, first + len), or -1. */
static int64_t free_in(const struct rmap *m, uint64_t first, uint64_t len)
{
	uint64_t end = first + len < m->n ? first + len : m->n;
	for (uint64_t i = first; i < end; i++) {
		if ((i & 7) == 0 && i + 8 <= end && m->used[i >> 3] == 0xff) {
			i += 7;
			continue;
		}
		if (!bit(m->used, i))
			return (int64_t)i;
	}
	return -1;
}

/* An unused row of a resident chunk, scanning from where the last one was
 * found (in steady state the chunk being consumed), else (with `any`) any
 * unused row from there; `row` (when < n) is preferred if resident and
 * unused, or if nothing is resident. -1 when there is none. */
static int64_t choose(struct rmap *m, uint64_t row, uint64_t k, int any, dlshim_rows_resident_fn resident, void *ctx)
{
	uint64_t nch = (m->n + k - 1) / k;
	if (row < m->n && !bit(m->used, row) && resident(ctx, row / k * k, k))
		return (int64_t)row;
	uint64_t c0 = (m->cursor / k) % nch;
	for (uint64_t s = 0; s < nch; s++) {
		uint64_t c = (c0 + s) % nch;
		int64_t j = free_in(m, c * k, k);
		if (j >= 0 && resident(ctx, c * k, k))
			return j;
	}
	if (!any)
		return -1;
	if (row < m->n && !bit(m->used, row))
		return (int64_t)row;
	for (uint64_t s = 0; s < nch; s++) {
		int64_t j = free_in(m, ((c0 + s) % nch) * k, k);
		if (j >= 0)
			return j;
	}
	return -1;
}

/* A row used this epoch, taken from a lease for requested row `row` of
 * dataset `key` (client-written: checked). */
static void record(struct rmap *m, uint64_t key, uint64_t row)
{
	m->nconsumed++;
	if (row >= m->n)
		return; /* a bad claim: the row is consumed, mapped to nothing */
	struct dset_req *d = dset(m, key);
	if (d && !bit(d->asked, row)) {
		set_bit(d->asked, row);
		d->nasked++;
	}
	return;
}

/* Look at a lease's outstanding entries: taken ones become mappings; with
 * `revoke` the others are given back to the epoch (a client's swap after
 * ours fails, so it never serves them). */
static void settle(struct dlshim_rows *r, struct dlshim_rows_lease *l, int revoke)
{
	struct rmap *m = l->m;
	for (uint32_t t = 0; t < l->n; t++) {
		if (!l->out[t])
			continue;
		uint64_t v = atomic_load_explicit(&l->shm->state[t], memory_order_acquire);
		if (v == 0 && revoke) {
			uint64_t zero = 0;
			if (atomic_compare_exchange_strong(&l->shm->state[t], &zero, DLSHIM_LEASE_REVOKED)) {
				l->out[t] = 0;
				if (m) {
					clear_bit(m->used, l->served[t]); /* unused again; its chunk held all along */
					m->nleased--;
				}
				continue;
			}
			v = zero;
		}
		if (v == 0)
			continue; /* still the client's to take */
		l->out[t] = 0;
		if (m == NULL)
			continue;
		m->nleased--;
		uint64_t served = l->served[t], row = v & ~DLSHIM_LEASE_TAKEN;
		row_spent(r, m, served);
		if (!(v & DLSHIM_LEASE_TAKEN) || row >= m->n) {
			m->nconsumed++; /* not a claim we understand: the row is spent, never reused */
			continue;
		}
		uint64_t key = l->shm->dset[t];
		record(m, key, row);
		if (m->to[row] == UNMAPPED) {
			m->to[row] = (uint32_t)served;
			m->nmapped++;
		}
	}
	if (revoke)
		l->n = 0;
}

/* Every lease of `m` but `except`: recorded (revoke 0) or emptied (1). */
static void settle_all(struct dlshim_rows *r, struct rmap *m, const struct dlshim_rows_lease *except, int revoke)
{
	for (size_t i = 0; i < r->nl; i++)
		if (r->l[i]->m == m && r->l[i] != except)
			settle(r, r->l[i], revoke);
}

void dlshim_rows_bind(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino, uint64_t nrows,
		      int64_t mtime_ns, uint64_t dset_hash, uint64_t chunk_rows)
{
	if (r == NULL || nrows == 0 || nrows >= UNMAPPED || chunk_rows == 0)
		return;
	struct rmap *m = get(r, job, job_key, dev, ino, nrows);
	if (m == NULL)
		return;
	struct hbind *b = NULL;
	for (int i = 0; i < m->nb && b == NULL; i++)
		if (m->b[i].dset == dset_hash)
			b = &m->b[i];
	if (b && b->mtime == mtime_ns && b->k == chunk_rows)
		return;
	if (b)
		unbind(r, m, b); /* another file version or chunking: other items */
	else if (m->nb < MAX_DSETS)
		b = &m->b[m->nb++];
	else
		return;
	uint64_t nch = (nrows + chunk_rows - 1) / chunk_rows;
	b->unused = calloc(nch, sizeof(uint32_t));
	b->held = calloc((nch + 7) / 8, 1);
	b->dset = dset_hash;
	b->k = chunk_rows;
	b->mtime = mtime_ns;
	if (b->unused == NULL || b->held == NULL) {
		unbind(r, m, b); /* no memory: this dataset's chunks are not held */
		*b = m->b[--m->nb];
		return;
	}
	for (uint64_t j = 0; j < nrows; j++)
		b->unused[j / chunk_rows] += !bit(m->used, j);
	for (size_t i = 0; i < r->nl; i++) /* rows out in leases are not served yet */
		for (uint32_t t = 0; r->l[i]->m == m && t < r->l[i]->n; t++)
			b->unused[r->l[i]->served[t] / chunk_rows] += r->l[i]->out[t];
	for (uint64_t c = 0; c < nch; c++)
		bsync(r, m, b, c);
}

void dlshim_rows_chunk_cached(struct dlshim_rows *r, uint64_t dev, uint64_t ino, uint64_t nrows, int64_t mtime_ns,
			      uint64_t dset_hash, uint64_t chunk_rows, uint64_t chunk)
{
	for (size_t i = 0; r && i < r->n; i++) {
		struct rmap *m = r->m[i];
		if (m->dev != dev || m->ino != ino || m->n != nrows)
			continue;
		for (int k = 0; k < m->nb; k++) {
			struct hbind *b = &m->b[k];
			if (b->dset == dset_hash && b->k == chunk_rows && b->mtime == mtime_ns && b->held &&
			    chunk < bchunks(m, b))
				bsync(r, m, b, chunk);
		}
	}
}

int64_t dlshim_rows_map(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			uint64_t nrows, uint64_t dset_key, uint64_t row, uint64_t chunk_rows,
			dlshim_rows_resident_fn resident, void *ctx)
{
	if (r == NULL || row >= nrows || nrows >= UNMAPPED || chunk_rows == 0)
		return -1;
	struct rmap *m = get(r, job, job_key, dev, ino, nrows);
	if (m == NULL)
		return -1;
	struct dset_req *d = dset(m, dset_key);
	if (d == NULL)
		return -1;
	settle_all(r, m, NULL, 0); /* rows taken from leases since the last look */
	if (bit(d->asked, row)) {
		/* Asked again by the same dataset: the job's next epoch, even with
		 * rows of this one never served (drop_last, a subset): waiting for
		 * them would serve the next epoch's first samples from the old
		 * epoch and then its rows again after all. A sample re-reading its
		 * row never gets here: the client serves it from its memory of the
		 * sample. */
		settle_all(r, m, NULL, 1); /* what was leased and not taken belongs to the old epoch */
		new_epoch(r, m);
		r->epochs++;
	}
	set_bit(d->asked, row);
	d->nasked++;
	if (m->to[row] != UNMAPPED)
		return m->to[row]; /* another dataset of the file asked first: same pair */
	int64_t j = choose(m, row, chunk_rows, 1, resident, ctx);
	if (j < 0 && m->nleased) {
		settle_all(r, m, NULL, 1); /* every unused row is in leases: take them back */
		j = choose(m, row, chunk_rows, 1, resident, ctx);
	}
	if (j < 0)
		return -1;
	set_bit(m->used, (uint64_t)j);
	row_spent(r, m, (uint64_t)j);
	m->to[row] = (uint32_t)j;
	m->nmapped++;
	m->nconsumed++;
	m->cursor = (uint64_t)j;
	return j;
}

/* The chunk to load ahead once `served`'s chunk has half its rows used. */
static int64_t ahead_of(const struct rmap *m, uint64_t k, uint64_t served, dlshim_rows_resident_fn resident, void *ctx)
{
	uint64_t nch = (m->n + k - 1) / k, c = served / k;
	uint64_t len = m->n - c * k < k ? m->n - c * k : k, unused = 0;
	for (uint64_t i = c * k; i < c * k + len; i++)
		unused += !bit(m->used, i);
	if (unused != len / 2)
		return -1; /* once per chunk, as its second half starts */
	for (uint64_t s = 1; s < nch; s++) {
		uint64_t d = (c + s) % nch, dl = m->n - d * k < k ? m->n - d * k : k, i = d * k;
		while (i < d * k + dl && !bit(m->used, i))
			i++;
		if (i == d * k + dl && !resident(ctx, d * k, k))
			return (int64_t)d; /* every row unused, not in memory */
	}
	return -1;
}

int64_t dlshim_rows_ahead(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			  uint64_t nrows, uint64_t chunk_rows, uint64_t served, dlshim_rows_resident_fn resident, void *ctx)
{
	struct rmap *m = r ? find(r, job, job_key, dev, ino, nrows) : NULL;
	if (m == NULL || chunk_rows == 0 || served >= m->n)
		return -1;
	return ahead_of(m, chunk_rows, served, resident, ctx);
}

struct dlshim_rows_lease *dlshim_rows_lease_new(struct dlshim_rows *r, struct dlshim_rows_lease_shm *shm)
{
	if (r == NULL || shm == NULL)
		return NULL;
	if (r->nl == r->lcap) {
		size_t cap = r->lcap ? r->lcap * 2 : 8;
		struct dlshim_rows_lease **v = realloc(r->l, cap * sizeof(*v));
		if (v == NULL)
			return NULL;
		r->l = v;
		r->lcap = cap;
	}
	struct dlshim_rows_lease *l = calloc(1, sizeof(*l));
	if (l == NULL)
		return NULL;
	memset(shm, 0, sizeof(*shm));
	shm->magic = DLSHIM_LEASE_MAGIC;
	l->shm = shm;
	r->l[r->nl++] = l;
	return l;
}

void dlshim_rows_lease_free(struct dlshim_rows *r, struct dlshim_rows_lease *l)
{
	if (r == NULL || l == NULL)
		return;
	settle(r, l, 1);
	for (size_t i = 0; i < r->nl; i++)
		if (r->l[i] == l) {
			r->l[i] = r->l[--r->nl];
			break;
		}
	free(l);
}

uint32_t dlshim_rows_lease_fill(struct dlshim_rows *r, struct dlshim_rows_lease *l, int job, uint64_t job_key,
				uint64_t dev, uint64_t ino, uint64_t nrows, uint32_t want, uint64_t chunk_rows,
				dlshim_rows_resident_fn resident, void *ctx, int64_t *ahead)
{
	*ahead = -1;
	if (r == NULL || l == NULL)
		return 0;
	settle(r, l, 1);
	l->m = NULL;
	l->shm->count = 0;
	if (nrows >= UNMAPPED || chunk_rows == 0)
		return 0;
	struct rmap *m = get(r, job, job_key, dev, ino, nrows);
	if (m == NULL)
		return 0;
	l->m = m;
	if (want > DLSHIM_LEASE_ROWS)
		want = DLSHIM_LEASE_ROWS;
	uint32_t n = 0;
	while (n < want) {
		/* Only rows already in memory (or being loaded): what to load is
		 * decided by the requests themselves and by load-ahead, as
		 * without leases, never by a row a worker may read much later. */
		int64_t j = choose(m, UINT64_MAX, chunk_rows, 0, resident, ctx);
		if (j < 0)
			break;
		set_bit(m->used, (uint64_t)j); /* its chunk stays held until taken */
		m->cursor = (uint64_t)j;
		m->nleased++;
		l->served[n] = (uint32_t)j;
		l->out[n] = 1;
		l->shm->served[n] = (uint32_t)j;
		l->shm->dset[n] = 0;
		atomic_store_explicit(&l->shm->state[n], 0, memory_order_relaxed);
		n++;
		if (*ahead < 0)
			*ahead = ahead_of(m, chunk_rows, (uint64_t)j, resident, ctx);
	}
	l->n = n;
	l->shm->fill++;
	atomic_thread_fence(memory_order_release);
	l->shm->count = n;
	return n;
}

uint64_t dlshim_rows_leased(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			    uint64_t nrows)
{
	struct rmap *m = r ? find(r, job, job_key, dev, ino, nrows) : NULL;
	if (m == NULL)
		return 0;
	settle_all(r, m, NULL, 0);
	return m->nleased;
}

uint64_t dlshim_rows_consumed(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			      uint64_t nrows)
{
	struct rmap *m = r ? find(r, job, job_key, dev, ino, nrows) : NULL;
	if (m == NULL)
		return 0;
	settle_all(r, m, NULL, 0);
	return m->nconsumed;
}

uint64_t dlshim_rows_epochs_started(const struct dlshim_rows *r) { return r ? r->epochs : 0; }

int64_t dlshim_rows_epoch(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			  uint64_t nrows)
{
	struct rmap *m = find(r, job, job_key, dev, ino, nrows);
	return m ? (int64_t)m->epoch : -1;
}

int64_t dlshim_rows_unasked(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			    uint64_t nrows)
{
	struct rmap *m = find(r, job, job_key, dev, ino, nrows);
	return m ? m->unasked : -1;
}
