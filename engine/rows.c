/* Row chunk identities and the per-job row mapping for HDF5 redirection
 * (include/dlshim/rows.h). The mapping follows redox's local protocol at
 * row granularity: serve the requested row if it is resident and unused,
 * else any resident unused row, else the requested row (loading its chunk
 * brings its neighbours in for the next requests). */
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

struct rmap {
	int job;
	uint64_t job_key, dev, ino, n;
	uint64_t epoch;
	uint8_t *used;            /* rows served this epoch */
	uint32_t *to;             /* requested row -> served row this epoch */
	uint64_t cursor;          /* where the last served row was: keep going from there */
	uint64_t nmapped;         /* rows mapped this epoch */
	int ndsets;
	struct dset_req d[MAX_DSETS];
};

struct dlshim_rows {
	struct rmap **m;
	size_t n, cap;
	uint64_t epochs;          /* epochs started, all maps together */
};

static int bit(const uint8_t *b, uint64_t i) { return (b[i >> 3] >> (i & 7)) & 1; }
static void set_bit(uint8_t *b, uint64_t i) { b[i >> 3] |= (uint8_t)(1u << (i & 7)); }

struct dlshim_rows *dlshim_rows_create(void) { return calloc(1, sizeof(struct dlshim_rows)); }

static void rmap_free(struct rmap *m)
{
	for (int i = 0; i < m->ndsets; i++)
		free(m->d[i].asked);
	free(m->used);
	free(m->to);
	free(m);
}

void dlshim_rows_destroy(struct dlshim_rows *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->n; i++)
		rmap_free(r->m[i]);
	free(r->m);
	free(r);
}

void dlshim_rows_job_end(struct dlshim_rows *r, int job)
{
	for (size_t i = 0; i < r->n;)
		if (r->m[i]->job == job) {
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

static void new_epoch(struct rmap *m)
{
	size_t bytes = (m->n + 7) / 8;
	memset(m->used, 0, bytes);
	memset(m->to, 0xff, m->n * sizeof(uint32_t));
	for (int i = 0; i < m->ndsets; i++) {
		memset(m->d[i].asked, 0, bytes);
		m->d[i].nasked = 0;
	}
	m->nmapped = 0;
	m->epoch++;
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

static int64_t choose(struct rmap *m, uint64_t row, uint64_t k, dlshim_rows_resident_fn resident, void *ctx)
{
	uint64_t nch = (m->n + k - 1) / k;
	if (!bit(m->used, row) && resident(ctx, row / k * k, k))
		return (int64_t)row;
	/* Resident chunks with unused rows, from where the last one was found:
	 * in steady state the first chunk looked at is the one being consumed. */
	uint64_t c0 = (m->cursor / k) % nch;
	for (uint64_t s = 0; s < nch; s++) {
		uint64_t c = (c0 + s) % nch;
		int64_t j = free_in(m, c * k, k);
		if (j >= 0 && resident(ctx, c * k, k))
			return j;
	}
	if (!bit(m->used, row))
		return (int64_t)row;
	for (uint64_t s = 0; s < nch; s++) {
		int64_t j = free_in(m, ((c0 + s) % nch) * k, k);
		if (j >= 0)
			return j;
	}
	return -1;
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
	if (bit(d->asked, row)) {
		/* Asked again: a re-read within the epoch keeps its row; once this
		 * dataset has asked for every row, or every row is mapped (clients
		 * serve a pair's second dataset from the mapping they were given,
		 * so that dataset's own asks may be few), it is the next epoch. */
		if (d->nasked < m->n && m->nmapped < m->n && m->to[row] != UNMAPPED)
			return m->to[row];
		new_epoch(m);
		r->epochs++;
	}
	set_bit(d->asked, row);
	d->nasked++;
	if (m->to[row] != UNMAPPED)
		return m->to[row]; /* another dataset of the file asked first: same pair */
	int64_t j = choose(m, row, chunk_rows, resident, ctx);
	if (j < 0)
		return -1;
	set_bit(m->used, (uint64_t)j);
	m->to[row] = (uint32_t)j;
	m->nmapped++;
	m->cursor = (uint64_t)j;
	return j;
}

int64_t dlshim_rows_ahead(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			  uint64_t nrows, uint64_t chunk_rows, uint64_t served, dlshim_rows_resident_fn resident, void *ctx)
{
	struct rmap *m = r ? find(r, job, job_key, dev, ino, nrows) : NULL;
	if (m == NULL || chunk_rows == 0 || served >= m->n)
		return -1;
	uint64_t k = chunk_rows, nch = (m->n + k - 1) / k, c = served / k;
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

uint64_t dlshim_rows_epochs_started(const struct dlshim_rows *r) { return r ? r->epochs : 0; }

int64_t dlshim_rows_epoch(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			  uint64_t nrows)
{
	struct rmap *m = find(r, job, job_key, dev, ino, nrows);
	return m ? (int64_t)m->epoch : -1;
}
