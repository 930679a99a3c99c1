/* Unit tests for the HDF5 row mapping (engine/rows.c): permutations per
 * epoch, pairs kept across datasets, resident rows first, epoch rollover,
 * chunk identities. The residency of chunks is simulated here. */
#include <setjmp.h>
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

static void test_reread_same_row(void **st)
{
	(void)st;
	struct dlshim_rows *r = dlshim_rows_create();
	struct sim s = {0};
	int64_t a = ask(r, &s, 1, 7);
	int64_t b = ask(r, &s, 1, 7);
	assert_int_equal(a, b);
	assert_int_equal(dlshim_rows_epoch(r, 0, 42, 1, 2, N), 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_epoch_is_permutation),
		cmocka_unit_test(test_pairs_across_datasets),
		cmocka_unit_test(test_resident_first),
		cmocka_unit_test(test_rollover_resident_first),
		cmocka_unit_test(test_reread_same_row),
		cmocka_unit_test(test_jobs_independent),
		cmocka_unit_test(test_rollover_with_sparse_asks),
		cmocka_unit_test(test_ahead),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_chunk_ids),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
