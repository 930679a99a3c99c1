/* Unit tests for the HDF5 row mapping (engine/rows.c): permutations per
 * epoch, pairs kept across datasets, resident rows first, epoch rollover,
 * chunk identities. The residency of chunks is simulated here. */
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlshim/rows.h"

#define N 100
#define K 10

/* Simulated cache: chunk c resident when res[c]; a served row makes its
 * chunk resident (as the coordinator's load does). */
struct sim {
	int res[N / K + 1];
	int calls;
};

static int resident(void *ctx, uint64_t first, uint64_t n)
{
	struct sim *s = ctx;
	assert_int_equal(first % K, 0);
	assert_int_equal(n, K);
	s->calls++;
	return s->res[first / K];
}

static int64_t ask(struct dlshim_rows *r, struct sim *s, uint64_t dset, uint64_t row)
{
	int64_t j = dlshim_rows_map(r, 0, 42, 1, 2, N, dset, row, K, resident, s);
	if (j >= 0)
		s->res[j / K] = 1;
	return j;
}

static void shuffle(uint64_t *v, int n, unsigned seed)
{
	for (int i = 0; i < n; i++)
		v[i] = (uint64_t)i;
	for (int i = n - 1; i > 0; i--) {
		seed = seed * 1103515245u + 12345u;
		int k = (int)((seed >> 8) % (unsigned)(i + 1));
		uint64_t t = v[i];
		v[i] = v[k];
		v[k] = t;
	}
}

static void test_epoch_is_permutation(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	uint64_t order[N];
	for (int ep = 0; ep < 3; ep++) {
		int seen[N] = {0};
		shuffle(order, N, 7u + (unsigned)ep);
		for (int i = 0; i < N; i++) {
			int64_t j = ask(r, &s, 1, order[i]);
			assert_true(j >= 0 && j < N);
			seen[j]++;
		}
		for (int i = 0; i < N; i++)
			assert_int_equal(seen[i], 1);
		assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), ep);
	}
	dlshim_rows_destroy(r);
}

static void test_pairs_across_datasets(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	uint64_t order[N];
	for (int ep = 0; ep < 2; ep++) {
		shuffle(order, N, 99u + (unsigned)ep);
		for (int i = 0; i < N; i++) {
			/* X then Y for one sample: Y gets X's row. */
			int64_t x = ask(r, &s, 1, order[i]);
			int64_t y = ask(r, &s, 2, order[i]);
			assert_true(x >= 0);
			assert_int_equal(x, y);
		}
	}
	/* A dataset of another first dimension has its own mapping. */
	int64_t j = dlshim_rows_map(r, 0, 42, 1, 2, N + 1, 3, 5, K, resident, &s);
	assert_int_equal(j, 5);
	dlshim_rows_destroy(r);
}

static void test_resident_first(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	s.res[3] = 1; /* rows 30..39 are in memory */
	/* Ten requests of non-resident rows are all served from chunk 3. */
	uint64_t asked[10] = {0, 11, 52, 67, 71, 85, 99, 4, 18, 23};
	for (int i = 0; i < 10; i++) {
		int64_t j = dlshim_rows_map(r, 0, 42, 1, 2, N, 1, asked[i], K, resident, &s);
		assert_true(j >= 30 && j < 40);
	}
	/* Chunk 3 is used up: the next request is served as itself (its chunk
	 * gets loaded). */
	int64_t j = dlshim_rows_map(r, 0, 42, 1, 2, N, 1, 57, K, resident, &s);
	assert_int_equal(j, 57);
	/* A resident, unused requested row is served as itself. */
	s.res[5] = 1;
	assert_int_equal(dlshim_rows_map(r, 0, 42, 1, 2, N, 1, 55, K, resident, &s), 55);
	dlshim_rows_destroy(r);
}

static void test_rollover_resident_first(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	uint64_t order[N];
	shuffle(order, N, 3);
	for (int i = 0; i < N; i++)
		ask(r, &s, 1, order[i]);
	/* End of epoch 0: only chunk 8 stays in memory. */
	memset(s.res, 0, sizeof(s.res));
	s.res[8] = 1;
	for (int i = 0; i < K; i++) {
		int64_t j = dlshim_rows_map(r, 0, 42, 1, 2, N, 1, order[i], K, resident, &s);
		assert_true(j >= 80 && j < 90);
	}
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 1);
	dlshim_rows_destroy(r);
}

/* A dataset asking for a row it asked for this epoch starts the next one,
 * although rows of this one were never served (drop_last leaves out less
 * than a batch): the unserved rows are not carried into it. (A sample's
 * re-read never asks: the client keeps the sample's row.) */
static void test_reask_starts_next_epoch(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	uint64_t order[N];
	shuffle(order, N, 9u);
	for (int i = 0; i < N - 8; i++)
		ask(r, &s, 1, order[i]);
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 0);
	shuffle(order, N, 10u);
	int seen[N] = {0};
	for (int i = 0; i < N - 8; i++) {
		int64_t j = ask(r, &s, 1, order[i]);
		assert_true(j >= 0 && j < N);
		assert_int_equal(seen[j]++, 0);
	}
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 1);
	assert_int_equal(dlshim_rows_unasked(r, 0, 42, 1, 2, N), 8);
	dlshim_rows_destroy(r);
}

/* Clients serve a pair's second dataset from the mapping the first one
 * got, so that dataset asks only now and then: the epoch still rolls over
 * once every row is mapped, whichever dataset asks again first, the pair
 * holds in the new epoch, and the rollover is counted for clients. */
static void test_rollover_with_sparse_asks(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	uint64_t order[N];
	shuffle(order, N, 11u);
	assert_int_equal(dlshim_rows_epochs_started(r), 0);
	int64_t y3 = ask(r, &s, 2, order[3]); /* the label asks once, first */
	for (int i = 0; i < N; i++) {
		int64_t x = ask(r, &s, 1, order[i]);
		if (i == 3)
			assert_int_equal(x, y3);
	}
	assert_int_equal(dlshim_rows_epochs_started(r), 0);
	int64_t x3 = ask(r, &s, 1, order[3]); /* x asks again after all rows: next epoch */
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 1);
	assert_int_equal(dlshim_rows_epochs_started(r), 1);
	assert_int_equal(ask(r, &s, 2, order[3]), x3);
	/* Epoch 1: the label dataset asks first for a row it asked in epoch 0
	 * (it is not a re-read: x's rollover reset the books). */
	int64_t y5 = ask(r, &s, 2, order[5]);
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 1);
	assert_int_equal(ask(r, &s, 1, order[5]), y5);
	int seen[N] = {0};
	seen[x3]++;
	seen[y5]++;
	for (int i = 0; i < N; i++)
		if (i != 5 && i != 3)
			seen[ask(r, &s, 1, order[i])]++; /* x leads, y is served by clients */
	for (int i = 0; i < N; i++)
		assert_int_equal(seen[i], 1);
	/* Every row mapped: y asking its row again starts epoch 2 although y
	 * itself asked for only two rows of epoch 1. */
	ask(r, &s, 2, order[5]);
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 2);
	assert_int_equal(dlshim_rows_epochs_started(r), 2);
	dlshim_rows_destroy(r);
}

/* Load-ahead asks for the next untouched chunk once, when the chunk being
 * consumed reaches half its rows, and never for one in memory. */
static void test_ahead(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	int asked = 0;
	for (int i = 0; i < K; i++) {
		int64_t j = ask(r, &s, 1, (uint64_t)(37 * i + 3) % N);
		assert_true(j >= 0 && j / K == 0); /* chunk 0 loaded by the first, then consumed */
		int64_t c = dlshim_rows_ahead(r, 0, 42, 1, 2, N, K, (uint64_t)j, resident, &s);
		if (i == K / 2 - 1)
			assert_int_equal(c, 1), asked++;
		else
			assert_int_equal(c, -1);
	}
	assert_int_equal(asked, 1);
	/* Chunk 1 came in: it is consumed next, and the candidate after it
	 * skips chunk 2, already in memory. */
	s.res[1] = s.res[2] = 1;
	for (int i = 0; i < K / 2; i++) {
		int64_t j = ask(r, &s, 1, 90 + (uint64_t)i); /* rows not asked before */
		assert_true(j / K == 1);
		int64_t c = dlshim_rows_ahead(r, 0, 42, 1, 2, N, K, (uint64_t)j, resident, &s);
		assert_int_equal(c, i == K / 2 - 1 ? 3 : -1);
	}
	assert_int_equal(dlshim_rows_ahead(r, 9, 42, 1, 2, N, K, 0, resident, &s), -1); /* no such job */
	dlshim_rows_destroy(r);
}

static void test_jobs_independent(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	s.res[0] = 1;
	for (int i = 0; i < K; i++)
		assert_true(dlshim_rows_map(r, 0, 42, 1, 2, N, 1, (uint64_t)(50 + i), K, resident, &s) < K);
	/* Another job still gets the rows of chunk 0 first. */
	assert_true(dlshim_rows_map(r, 1, 43, 1, 2, N, 1, 50, K, resident, &s) < K);
	dlshim_rows_job_end(r, 0);
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), -1);
	assert_int_equal(dlshim_rows_epoch(r, 1, 43, 1, 2, N), 0);
	dlshim_rows_destroy(r);
}

static void test_bad_input(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	assert_int_equal(dlshim_rows_map(r, 0, 1, 1, 2, N, 1, N, K, resident, &s), -1);
	assert_int_equal(dlshim_rows_map(r, 0, 1, 1, 2, N, 1, 3, 0, resident, &s), -1);
	assert_int_equal(dlshim_rows_map(NULL, 0, 1, 1, 2, N, 1, 3, K, resident, &s), -1);
	/* More datasets than a mapping tracks: refused, not crashed. */
	int refused = 0;
	for (uint64_t d = 0; d < 40; d++)
		refused += dlshim_rows_map(r, 0, 1, 1, 2, N, 100 + d, 3, K, resident, &s) < 0;
	assert_true(refused > 0);
	dlshim_rows_destroy(r);
}

static void test_chunk_ids(void **st)
{
	(void)st;
	struct dlshim_file_id a, b, c, d;
	uint64_t h = dlshim_rows_name_hash("/x");
	dlshim_rows_chunk_id(5, 6, 7, h, 16, 0, 100, &a);
	dlshim_rows_chunk_id(5, 6, 7, h, 16, 1, 100, &b);
	dlshim_rows_chunk_id(5, 6, 7, dlshim_rows_name_hash("/y"), 16, 0, 100, &c);
	dlshim_rows_chunk_id(5, 6, 7, h, 32, 0, 100, &d);
	assert_true(a.dev & DLSHIM_ROWS_DEV_BIT);
	assert_int_equal(a.dev & ~DLSHIM_ROWS_DEV_BIT, 5);
	assert_true(a.ino != b.ino && a.ino != c.ino && a.ino != d.ino);
	assert_int_equal(a.size, 100);
	assert_int_equal(a.mtime_ns, 7);
	dlshim_rows_chunk_id(5, 6, 7, h, 16, 0, 100, &b);
	assert_int_equal(a.ino, b.ino);
}


/* ---- leases ---- */

/* A simulated client: takes rows from its lease as the shim does, asks
 * the coordinator (map, then refill) when the lease has none. */
struct client {
	struct dlshim_rows_lease_shm shm;
	struct dlshim_rows_lease *l;
	uint32_t cur;
	int asks;
};

static int64_t take(struct client *c, uint64_t dkey, uint64_t row)
{
	while (c->cur < c->shm.count && c->cur < DLSHIM_LEASE_ROWS) {
		uint32_t t = c->cur++;
		c->shm.dset[t] = dkey;
		uint64_t zero = 0;
		if (atomic_compare_exchange_strong(&c->shm.state[t], &zero, DLSHIM_LEASE_TAKEN | row))
			return c->shm.served[t];
	}
	return -1;
}

static int64_t client_read(struct dlshim_rows *r, struct sim *s, struct client *c, uint64_t dkey, uint64_t row,
			   uint32_t want)
{
	int64_t j = take(c, dkey, row);
	if (j >= 0)
		return j;
	c->asks++;
	j = ask(r, s, dkey, row);
	int64_t ahead;
	uint32_t n = dlshim_rows_lease_fill(r, c->l, 0, 42, 1, 2, N, want, K, resident, s, &ahead);
	c->cur = 0;
	assert_true(n <= want);
	for (uint32_t t = 0; t < n; t++)
		s->res[c->shm.served[t] / K] = 1; /* the client's read loads the chunk */
	return j;
}

static struct client *client_new(struct dlshim_rows *r)
{
	struct client *c = calloc(1, sizeof(*c));
	assert_non_null(c);
	c->l = dlshim_rows_lease_new(r, &c->shm);
	assert_non_null(c->l);
	return c;
}

/* Two clients taking most rows from leases: every epoch is still a
 * permutation, the labels' dataset (asking the coordinator) gets the row
 * taken for the inputs, and far fewer asks than rows. */
static void test_lease_permutation_and_pairs(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	struct client *c[2] = {client_new(r), client_new(r)};
	uint64_t order[N];
	for (int ep = 0; ep < 3; ep++) {
		int seen[N] = {0};
		shuffle(order, N, 11u + (unsigned)ep);
		for (int i = 0; i < N; i++) {
			struct client *cl = c[(order[i] / 7) % 2];
			int64_t j = client_read(r, &s, cl, 1, order[i], 8);
			assert_true(j >= 0 && j < N);
			assert_int_equal(seen[j], 0);
			seen[j] = 1;
			/* The label of every third sample asks the coordinator. */
			if (i % 3 == 0)
				assert_int_equal(ask(r, &s, 2, order[i]), j);
		}
		assert_int_equal(dlshim_rows_consumed(r, 0, 42, 1, 2, N), N);
		assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), ep);
		/* Every row was asked for in the epoch before. */
		assert_int_equal(dlshim_rows_unasked(r, 0, 42, 1, 2, N), ep ? 0 : -1);
	}
	assert_true(c[0]->asks + c[1]->asks < N);
	for (int i = 0; i < 2; i++) {
		dlshim_rows_lease_free(r, c[i]->l);
		free(c[i]);
	}
	dlshim_rows_destroy(r);
}

/* A job that reads only rows 0-59 (a split by index): its leases still
 * serve rows of the whole file, and the epoch that ends says that 40 rows
 * were never asked for (the coordinator warns about it). */
static void test_lease_subset_unasked(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	struct client *c = client_new(r);
	uint64_t order[60];
	int outside = 0;
	for (int ep = 0; ep < 4; ep++) {
		shuffle(order, 60, 5u + (unsigned)ep);
		for (int i = 0; i < 60; i++) {
			int64_t j = client_read(r, &s, c, 1, order[i], 8);
			assert_true(j >= 0 && j < N);
			outside += j >= 60;
		}
		if (dlshim_rows_epoch(r, 0, 42, 1, 2, N) == 0)
			assert_int_equal(dlshim_rows_unasked(r, 0, 42, 1, 2, N), -1);
	}
	assert_true(outside > 0);
	assert_true(dlshim_rows_epoch(r, 0, 42, 1, 2, N) >= 1);
	assert_int_equal(dlshim_rows_unasked(r, 0, 42, 1, 2, N), 40);
	assert_int_equal(dlshim_rows_unasked(r, 0, 42, 1, 3, N), -1); /* no such mapping */
	dlshim_rows_lease_free(r, c->l);
	free(c);
	dlshim_rows_destroy(r);
}

/* A client that exits (or crashes) with rows still in its lease: the rows
 * it took stay consumed, the others go back, and the epoch is completed by
 * another client without a row twice or a row lost. */
static void test_lease_client_exit(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	struct client *a = client_new(r), *b = client_new(r);
	uint64_t order[N];
	shuffle(order, N, 5);
	int seen[N] = {0}, i = 0;
	for (; i < 13; i++) {
		int64_t j = client_read(r, &s, a, 1, order[i], 32);
		assert_int_equal(seen[j], 0);
		seen[j] = 1;
	}
	assert_true(dlshim_rows_leased(r, 0, 42, 1, 2, N) > 0);
	dlshim_rows_lease_free(r, a->l); /* the connection ended */
	free(a);
	assert_int_equal(dlshim_rows_leased(r, 0, 42, 1, 2, N), 0);
	assert_int_equal(dlshim_rows_consumed(r, 0, 42, 1, 2, N), 13);
	for (; i < N; i++) {
		int64_t j = client_read(r, &s, b, 1, order[i], 32);
		assert_true(j >= 0 && j < N);
		assert_int_equal(seen[j], 0);
		seen[j] = 1;
	}
	for (int k = 0; k < N; k++)
		assert_int_equal(seen[k], 1);
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 0);
	dlshim_rows_lease_free(r, b->l);
	free(b);
	dlshim_rows_destroy(r);
}

/* Every unused row out in one client's lease: another client's ask takes
 * them back (its own request and lease are served, the first client's
 * swaps fail) and no row is served twice. */
static void test_lease_revoked_when_needed(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	struct client *a = client_new(r), *b = client_new(r);
	int seen[N] = {0}, served = 0;
	/* a's ask maps one row and leases 64; b, then a, alternate. */
	for (uint64_t i = 0; i < N; i++) {
		struct client *cl = i < 40 ? a : (i % 2 ? a : b);
		int64_t j = client_read(r, &s, cl, 1, i, DLSHIM_LEASE_ROWS);
		assert_true(j >= 0 && j < N);
		assert_int_equal(seen[j], 0);
		seen[j] = 1;
		served++;
	}
	assert_int_equal(served, N);
	assert_true(b->asks >= 1);
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 0);
	/* A taken entry cannot be revoked, a revoked one cannot be taken. */
	assert_int_equal(take(a, 1, 0), -1);
	dlshim_rows_lease_free(r, a->l);
	dlshim_rows_lease_free(r, b->l);
	free(a);
	free(b);
	dlshim_rows_destroy(r);
}

/* The shared area is the client's to scribble on: a forged served row, a
 * claim of a row out of range and a garbage state word never make the
 * coordinator serve a row twice or map a row it did not lease. */
static void test_lease_hostile_client(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	struct client *c = client_new(r);
	int64_t j0 = client_read(r, &s, c, 1, 0, 8); /* maps row 0 and fills 8 */
	assert_true(j0 >= 0);
	assert_true(c->shm.count == 8);
	uint32_t real1 = c->shm.served[0];
	c->shm.served[0] = (uint32_t)j0; /* forged: claims an already served row */
	assert_int_equal(take(c, 1, 1), j0); /* what the client reads is its own affair */
	atomic_store(&c->shm.state[1], DLSHIM_LEASE_TAKEN | (N + 5)); /* row out of range */
	atomic_store(&c->shm.state[2], 12345);                         /* neither free nor taken */
	/* The coordinator records its own leased row for request 1. */
	assert_int_equal(ask(r, &s, 2, 1), real1);
	assert_int_equal(dlshim_rows_consumed(r, 0, 42, 1, 2, N), 4);
	dlshim_rows_lease_free(r, c->l);
	assert_int_equal(dlshim_rows_leased(r, 0, 42, 1, 2, N), 0);
	/* The rest of the epoch: the 96 other rows once each, the 3 spent ones never. */
	struct client *d = client_new(r);
	int seen[N] = {0};
	seen[j0] = seen[real1] = 1;
	int n = 2;
	for (uint64_t i = 2; i < N; i++) {
		int64_t j = client_read(r, &s, d, 1, i, 8);
		if (j < 0)
			break;
		assert_int_equal(seen[j], 0);
		seen[j] = 1;
		n++;
	}
	assert_int_equal(n, N - 2); /* two rows were spent by the garbage entries */
	dlshim_rows_lease_free(r, d->l);
	free(c);
	free(d);
	dlshim_rows_destroy(r);
}

/* A new epoch takes back what leases still hold of the old one. */
static void test_lease_epoch_rollover(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	struct client *c = client_new(r);
	for (uint64_t i = 0; i < N; i++)
		assert_true(client_read(r, &s, c, 1, i, 16) >= 0);
	assert_int_equal(dlshim_rows_leased(r, 0, 42, 1, 2, N), 0);
	/* Next epoch: the lease is exhausted, the ask starts epoch 1 and refills. */
	assert_true(client_read(r, &s, c, 1, 3, 16) >= 0);
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 1);
	assert_int_equal(dlshim_rows_leased(r, 0, 42, 1, 2, N), 16);
	/* Another dataset re-asking a row after every row was consumed... is
	 * not the case here; a re-ask by the same dataset of the same row is the
	 * next epoch (rows asked once): leases of epoch 1 are revoked. */
	for (uint64_t i = 0; i < N; i++)
		if (i != 3)
			assert_true(ask(r, &s, 1, i) >= 0);
	assert_true(ask(r, &s, 1, 3) >= 0);
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 2);
	assert_int_equal(dlshim_rows_leased(r, 0, 42, 1, 2, N), 0);
	assert_int_equal(take(c, 1, 7), -1); /* revoked */
	dlshim_rows_lease_free(r, c->l);
	free(c);
	dlshim_rows_destroy(r);
}

/* ---- holds: a mapping keeps the chunks it has rows of still to serve. */

#define MT 5    /* file version */
#define K2 50   /* the labels' chunking */

/* Simulated cache items: holds per chunk of datasets 1 (K rows) and 2
 * (K2 rows); a chunk is known once `known` says so. */
struct holds {
	int known[2][N / K + 1];
	int n[2][N / K + 1];
	int spent[2];             /* chunks let go because every row was served */
};

static int which(const struct dlshim_file_id *id, int *d, uint64_t *c)
{
	for (*d = 0; *d < 2; (*d)++)
		for (*c = 0; *c < (uint64_t)(*d ? N / K2 : N / K); (*c)++) {
			struct dlshim_file_id x;
			dlshim_rows_chunk_id(1, 2, MT, (uint64_t)*d + 1, *d ? K2 : K, *c, 0, &x);
			if (x.dev == id->dev && x.ino == id->ino)
				return 1;
		}
	return 0;
}

static int hold(void *ctx, int job, const struct dlshim_file_id *id, int how)
{
	struct holds *h = ctx;
	int d;
	uint64_t c;
	assert_int_equal(job, 0);
	if (!which(id, &d, &c) || !h->known[d][c])
		return 0; /* not in the cache (another chunking: never loaded here) */
	h->n[d][c] += how > 0 ? 1 : -1;
	h->spent[d] += how < 0;
	assert_true(h->n[d][c] == 0 || h->n[d][c] == 1); /* one mapping: held once or not */
	return 1;
}

static int held_chunks(const struct holds *h, int d)
{
	int t = 0;
	for (int c = 0; c < (d ? N / K2 : N / K); c++)
		t += h->n[d][c];
	return t;
}

static struct dlshim_rows *rows_holding(struct holds *h)
{
	struct dlshim_rows *r = dlshim_rows_create();
	assert_non_null(r);
	dlshim_rows_set_hold(r, hold, h);
	return r;
}

/* Chunks are held until their last row is served, held again at the next
 * epoch and given back when the job ends; a chunk the cache learns of
 * later is held from then on. */
static void test_holds_follow_the_epoch(void **st)
{
	(void)st;
	struct holds h = {0};
	struct sim s = {0};
	struct dlshim_rows *r = rows_holding(&h);
	for (int c = 0; c < N / K; c++)
		h.known[0][c] = c != 7; /* chunk 7 never loaded yet */
	h.known[1][0] = h.known[1][1] = 1;
	dlshim_rows_bind(r, 0, 42, 1, 2, N, MT, 1, K);
	dlshim_rows_bind(r, 0, 42, 1, 2, N, MT, 2, K2);
	dlshim_rows_bind(r, 0, 42, 1, 2, N, MT, 2, K2); /* again: nothing changes */
	assert_int_equal(held_chunks(&h, 0), N / K - 1);
	assert_int_equal(h.n[0][7], 0);
	assert_int_equal(held_chunks(&h, 1), 2);
	h.known[0][7] = 1;
	dlshim_rows_chunk_cached(r, 1, 2, N, MT, 1, K, 7);
	assert_int_equal(h.n[0][7], 1);
	uint64_t order[N];
	shuffle(order, N, 11);
	int used[N / K] = {0}, used2[N / K2] = {0};
	for (int i = 0; i < N; i++) {
		int64_t j = ask(r, &s, 1, order[i]);
		assert_true(j >= 0);
		used[j / K]++;
		used2[j / K2]++;
		for (int c = 0; c < N / K; c++)
			assert_int_equal(h.n[0][c], used[c] < K);
		for (int c = 0; c < N / K2; c++)
			assert_int_equal(h.n[1][c], used2[c] < K2);
	}
	assert_int_equal(held_chunks(&h, 0), 0);
	assert_int_equal(h.spent[0], N / K);
	assert_int_equal(h.spent[1], N / K2);
	/* The next epoch needs every chunk again. */
	int64_t j = ask(r, &s, 1, order[0]);
	assert_true(j >= 0);
	assert_int_equal(held_chunks(&h, 0), N / K);
	assert_int_equal(held_chunks(&h, 1), N / K2);
	/* Another chunking of the dataset: the old chunks are given back. */
	dlshim_rows_bind(r, 0, 42, 1, 2, N, MT, 2, 25);
	assert_int_equal(held_chunks(&h, 1), 0);
	dlshim_rows_job_end(r, 0);
	assert_int_equal(held_chunks(&h, 0), 0);
	assert_int_equal(h.spent[0], N / K); /* given back at job end, not consumed */
	dlshim_rows_destroy(r);
}

/* A leased row keeps its chunk held until the client takes it (it reads
 * the chunk right after); a row given back (revoked) is unused again. */
static void test_holds_with_leases(void **st)
{
	(void)st;
	struct holds h = {0};
	struct sim s = {0};
	struct dlshim_rows *r = rows_holding(&h);
	for (int c = 0; c < N / K; c++)
		h.known[0][c] = 1;
	dlshim_rows_bind(r, 0, 42, 1, 2, N, MT, 1, K);
	struct client *c = client_new(r);
	s.res[4] = 1;
	int64_t j = ask(r, &s, 1, 41);
	assert_int_equal(j, 41);
	int64_t ahead;
	assert_int_equal(dlshim_rows_lease_fill(r, c->l, 0, 42, 1, 2, N, K - 1, K, resident, &s, &ahead), K - 1);
	assert_int_equal(h.n[0][4], 1); /* every other row of chunk 4 is leased, none taken */
	for (uint64_t i = 0; i < 5; i++)
		assert_true(take(c, 1, i) / K == 4);
	assert_int_equal(h.n[0][4], 1); /* the coordinator has not looked yet */
	/* Refilled with nothing resident: 5 taken rows are spent, 4 go back. */
	s.res[4] = 0;
	assert_int_equal(dlshim_rows_lease_fill(r, c->l, 0, 42, 1, 2, N, K - 1, K, resident, &s, &ahead), 0);
	assert_int_equal(h.n[0][4], 1);
	assert_int_equal(held_chunks(&h, 0), N / K);
	/* The last 4 rows of chunk 4 served: it is let go. */
	s.res[4] = 1;
	for (uint64_t i = 0; i < 4; i++)
		assert_true(ask(r, &s, 1, 10 + i) / K == 4);
	assert_int_equal(h.n[0][4], 0);
	assert_int_equal(held_chunks(&h, 0), N / K - 1);
	dlshim_rows_lease_free(r, c->l);
	free(c);
	dlshim_rows_job_end(r, 0);
	assert_int_equal(held_chunks(&h, 0), 0);
	dlshim_rows_destroy(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_epoch_is_permutation),
		cmocka_unit_test(test_pairs_across_datasets),
		cmocka_unit_test(test_resident_first),
		cmocka_unit_test(test_rollover_resident_first),
		cmocka_unit_test(test_reask_starts_next_epoch),
		cmocka_unit_test(test_jobs_independent),
		cmocka_unit_test(test_rollover_with_sparse_asks),
		cmocka_unit_test(test_ahead),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_chunk_ids),
		cmocka_unit_test(test_lease_permutation_and_pairs),
		cmocka_unit_test(test_lease_subset_unasked),
		cmocka_unit_test(test_lease_client_exit),
		cmocka_unit_test(test_lease_revoked_when_needed),
		cmocka_unit_test(test_lease_hostile_client),
		cmocka_unit_test(test_lease_epoch_rollover),
		cmocka_unit_test(test_holds_follow_the_epoch),
		cmocka_unit_test(test_holds_with_leases),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
