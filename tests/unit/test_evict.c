/* Unit tests for the eviction policies (engine/evict.h) driven directly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "evict.h"

#define NONE DLSHIM_NO_ITEM_EV

static struct evictor *new_ev(enum dlshim_evict p, uint64_t seed, uint32_t cap)
{
	struct evictor *ev = malloc(sizeof(*ev));
	assert_non_null(ev);
	assert_int_equal(evict_init(ev, p, seed), 0);
	assert_int_equal(evict_reserve(ev, cap), 0);
	return ev;
}

static void free_ev(struct evictor *ev)
{
	evict_free(ev);
	free(ev);
}

static int setup_lru(void **state) { *state = new_ev(DLSHIM_EVICT_LRU, 1, 16); return 0; }
static int setup_fifo(void **state) { *state = new_ev(DLSHIM_EVICT_FIFO, 1, 16); return 0; }
static int setup_refcnt(void **state) { *state = new_ev(DLSHIM_EVICT_REFCNT, 1, 16); return 0; }
static int setup_random(void **state) { *state = new_ev(DLSHIM_EVICT_RANDOM, 42, 16); return 0; }
static int teardown(void **state) { free_ev(*state); return 0; }

/* Pop victims until none are left, recording the order. Returns the count. */
static int drain(struct evictor *ev, uint32_t *out, int max)
{
	int n = 0;
	uint32_t v;
	while ((v = evict_victim(ev)) != NONE) {
		assert_true(n < max);
		assert_true(evict_has(ev, v));
		out[n++] = v;
		evict_del(ev, v);
		assert_false(evict_has(ev, v));
	}
	return n;
}

/* An empty evictor has no victim, for every policy. */
static void test_empty_no_victim(void **state)
{
	(void)state;
	for (int p = DLSHIM_EVICT_REFCNT; p <= DLSHIM_EVICT_RANDOM; p++) {
		struct evictor *ev = new_ev((enum dlshim_evict)p, 7, 4);
		assert_int_equal(evict_victim(ev), NONE);
		assert_false(evict_has(ev, 0));
		assert_false(evict_has(ev, 100000)); /* beyond cap: not present, no fault */
		free_ev(ev);
	}
}

/* LRU: least recently added/touched first; touch moves an item to the front. */
static void test_lru_order(void **state)
{
	struct evictor *ev = *state;
	for (uint32_t i = 0; i < 5; i++)
		evict_add(ev, i, 0);
	evict_touch(ev, 0); /* 0 becomes most recent */
	evict_touch(ev, 2);
	uint32_t got[8];
	assert_int_equal(drain(ev, got, 8), 5);
	uint32_t want[] = {1, 3, 4, 0, 2};
	assert_memory_equal(got, want, sizeof(want));
}

/* LRU: recount is ignored (one bucket), a touch of an absent item is a no-op. */
static void test_lru_recount_ignored(void **state)
{
	struct evictor *ev = *state;
	evict_add(ev, 3, 5);
	evict_add(ev, 4, 0);
	evict_recount(ev, 3, 0);
	evict_touch(ev, 9); /* absent */
	assert_false(evict_has(ev, 9));
	uint32_t got[4];
	assert_int_equal(drain(ev, got, 4), 2);
	assert_int_equal(got[0], 3);
	assert_int_equal(got[1], 4);
}

/* FIFO: insertion order, touches ignored. */
static void test_fifo_order(void **state)
{
	struct evictor *ev = *state;
	for (uint32_t i = 0; i < 5; i++)
		evict_add(ev, i, (uint32_t)(4 - i));
	evict_touch(ev, 0);
	evict_touch(ev, 1);
	evict_recount(ev, 2, 60);
	uint32_t got[8];
	assert_int_equal(drain(ev, got, 8), 5);
	uint32_t want[] = {0, 1, 2, 3, 4};
	assert_memory_equal(got, want, sizeof(want));
}

/* FIFO: deleting from the middle keeps the rest in order; re-adding goes last. */
static void test_fifo_delete_middle(void **state)
{
	struct evictor *ev = *state;
	for (uint32_t i = 0; i < 4; i++)
		evict_add(ev, i, 0);
	evict_del(ev, 1);
	evict_add(ev, 1, 0);
	uint32_t got[8];
	assert_int_equal(drain(ev, got, 8), 4);
	uint32_t want[] = {0, 2, 3, 1};
	assert_memory_equal(got, want, sizeof(want));
}

/* RefCnt: lowest bucket first, LRU within a bucket. */
static void test_refcnt_buckets(void **state)
{
	struct evictor *ev = *state;
	evict_add(ev, 0, 2);
	evict_add(ev, 1, 0);
	evict_add(ev, 2, 1);
	evict_add(ev, 3, 0);
	evict_add(ev, 4, 2);
	evict_add(ev, 5, 1);
	evict_touch(ev, 1); /* within bucket 0: 3 is now the least recent */
	uint32_t got[8];
	assert_int_equal(drain(ev, got, 8), 6);
	uint32_t want[] = {3, 1, 2, 5, 0, 4};
	assert_memory_equal(got, want, sizeof(want));
}

/* RefCnt: recount moves an item between buckets (to the front of the new one). */
static void test_refcnt_recount(void **state)
{
	struct evictor *ev = *state;
	evict_add(ev, 0, 0);
	evict_add(ev, 1, 0);
	evict_add(ev, 2, 3);
	evict_add(ev, 3, 1);
	assert_int_equal(evict_victim(ev), 0);
	evict_recount(ev, 0, 5);   /* 0 leaves bucket 0 */
	assert_int_equal(evict_victim(ev), 1);
	evict_recount(ev, 1, 1);   /* 1 joins bucket 1 in front of 3 */
	assert_int_equal(evict_victim(ev), 3);
	evict_recount(ev, 2, 0);
	assert_int_equal(evict_victim(ev), 2);
	evict_recount(ev, 2, 0);   /* same bucket: no move, still the victim */
	assert_int_equal(evict_victim(ev), 2);
	evict_recount(ev, 7, 0);   /* absent: no-op */
	assert_false(evict_has(ev, 7));
	uint32_t got[8];
	assert_int_equal(drain(ev, got, 8), 4);
	uint32_t want[] = {2, 3, 1, 0};
	assert_memory_equal(got, want, sizeof(want));
}

/* RefCnt: counts above 64 clamp into the top bucket (LRU among them), below 64 goes first. */
static void test_refcnt_clamp(void **state)
{
	struct evictor *ev = *state;
	evict_add(ev, 0, 1000);
	evict_add(ev, 1, 64);
	evict_add(ev, 2, UINT32_MAX);
	evict_add(ev, 3, 63);
	assert_int_equal(ev->bucket_of[0], EVICT_BUCKETS - 1);
	assert_int_equal(ev->bucket_of[2], EVICT_BUCKETS - 1);
	uint32_t got[8];
	assert_int_equal(drain(ev, got, 8), 4);
	uint32_t want[] = {3, 0, 1, 2};
	assert_memory_equal(got, want, sizeof(want));
	/* A recount from 70 to 65 stays in the clamped bucket (no reorder). */
	evict_add(ev, 5, 70);
	evict_add(ev, 6, 70);
	evict_recount(ev, 5, 65);
	assert_int_equal(evict_victim(ev), 5);
}

/* add/del/has idempotence for every policy: double add keeps one entry, double del is harmless. */
static void test_idempotence(void **state)
{
	(void)state;
	for (int p = DLSHIM_EVICT_REFCNT; p <= DLSHIM_EVICT_RANDOM; p++) {
		struct evictor *ev = new_ev((enum dlshim_evict)p, 3, 8);
		evict_add(ev, 1, 0);
		evict_add(ev, 1, 0);
		evict_add(ev, 1, 2);
		evict_add(ev, 2, 0);
		assert_true(evict_has(ev, 1));
		assert_true(evict_has(ev, 2));
		if (p == DLSHIM_EVICT_RANDOM)
			assert_int_equal(ev->n, 2);
		evict_del(ev, 1);
		evict_del(ev, 1);
		evict_del(ev, 5); /* never added */
		assert_false(evict_has(ev, 1));
		assert_true(evict_has(ev, 2));
		assert_int_equal(evict_victim(ev), 2);
		evict_del(ev, 2);
		assert_int_equal(evict_victim(ev), NONE);
		/* Adding beyond the reserved capacity is ignored, not a fault. */
		evict_add(ev, ev->cap + 5, 0);
		assert_int_equal(evict_victim(ev), NONE);
		free_ev(ev);
	}
}

/* reserve: growth preserves membership and order; shrinking requests are no-ops. */
static void test_reserve_growth(void **state)
{
	(void)state;
	for (int p = DLSHIM_EVICT_REFCNT; p <= DLSHIM_EVICT_FIFO; p++) {
		struct evictor *ev = new_ev((enum dlshim_evict)p, 3, 10);
		uint32_t cap0 = ev->cap;
		assert_true(cap0 >= 10);
		for (uint32_t i = 0; i < 10; i++)
			evict_add(ev, i, i % 2);
		assert_int_equal(evict_reserve(ev, 5), 0);
		assert_int_equal(ev->cap, cap0);
		assert_int_equal(evict_reserve(ev, cap0 * 4 + 1), 0);
		assert_true(ev->cap >= cap0 * 4 + 1);
		/* New ids are absent after growth. */
		for (uint32_t i = cap0; i < ev->cap; i += 97)
			assert_false(evict_has(ev, i));
		evict_add(ev, ev->cap - 1, 0);
		uint32_t got[16];
		assert_int_equal(drain(ev, got, 16), 11);
		if (p == DLSHIM_EVICT_REFCNT) {
			/* bucket 0 (evens, added 0,2,4,6,8 then cap-1) then bucket 1 (1,3,5,7,9) */
			uint32_t want[] = {0, 2, 4, 6, 8, ev->cap - 1, 1, 3, 5, 7, 9};
			assert_memory_equal(got, want, sizeof(want));
		} else {
			uint32_t want[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ev->cap - 1};
			assert_memory_equal(got, want, sizeof(want));
		}
		free_ev(ev);
	}
	/* Random: membership survives growth. */
	struct evictor *ev = new_ev(DLSHIM_EVICT_RANDOM, 3, 10);
	for (uint32_t i = 0; i < 10; i++)
		evict_add(ev, i, 0);
	assert_int_equal(evict_reserve(ev, ev->cap * 3), 0);
	uint32_t got[16];
	assert_int_equal(drain(ev, got, 16), 10);
	uint32_t seen = 0;
	for (int i = 0; i < 10; i++) {
		assert_true(got[i] < 10);
		seen |= 1u << got[i];
	}
	assert_int_equal(seen, 0x3ff);
	free_ev(ev);
}

/* Random: only evictable items are chosen, and deletion keeps the set consistent. */
static void test_random_only_evictable(void **state)
{
	struct evictor *ev = *state;
	for (uint32_t i = 0; i < 10; i++)
		evict_add(ev, i, 0);
	evict_del(ev, 0);
	evict_del(ev, 5);
	evict_del(ev, 9);
	for (int k = 0; k < 2000; k++) {
		uint32_t v = evict_victim(ev);
		assert_true(v < 10);
		assert_true(v != 0 && v != 5 && v != 9);
		assert_true(evict_has(ev, v));
	}
	uint32_t got[16];
	assert_int_equal(drain(ev, got, 16), 7);
}

/* Random: the same seed gives the same victim sequence; another seed differs. */
static void test_random_deterministic(void **state)
{
	(void)state;
	uint32_t seq[3][64];
	uint64_t seeds[3] = {11, 11, 12};
	for (int r = 0; r < 3; r++) {
		struct evictor *ev = new_ev(DLSHIM_EVICT_RANDOM, seeds[r], 64);
		for (uint32_t i = 0; i < 64; i++)
			evict_add(ev, i, 0);
		for (int k = 0; k < 64; k++)
			seq[r][k] = evict_victim(ev);
		free_ev(ev);
	}
	assert_memory_equal(seq[0], seq[1], sizeof(seq[0]));
	assert_memory_not_equal(seq[0], seq[2], sizeof(seq[0]));
}

/* Random: roughly uniform over many draws (each of 8 items within +-15% of the mean). */
static void test_random_uniform(void **state)
{
	struct evictor *ev = *state;
	enum { N = 8, DRAWS = 80000 };
	unsigned hist[N] = {0};
	for (uint32_t i = 0; i < N; i++)
		evict_add(ev, i + 3, 0);
	for (int k = 0; k < DRAWS; k++) {
		uint32_t v = evict_victim(ev);
		assert_true(v >= 3 && v < 3 + N);
		hist[v - 3]++;
	}
	for (int i = 0; i < N; i++) {
		assert_true(hist[i] > DRAWS / N * 85 / 100);
		assert_true(hist[i] < DRAWS / N * 115 / 100);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty_no_victim),
		cmocka_unit_test_setup_teardown(test_lru_order, setup_lru, teardown),
		cmocka_unit_test_setup_teardown(test_lru_recount_ignored, setup_lru, teardown),
		cmocka_unit_test_setup_teardown(test_fifo_order, setup_fifo, teardown),
		cmocka_unit_test_setup_teardown(test_fifo_delete_middle, setup_fifo, teardown),
		cmocka_unit_test_setup_teardown(test_refcnt_buckets, setup_refcnt, teardown),
		cmocka_unit_test_setup_teardown(test_refcnt_recount, setup_refcnt, teardown),
		cmocka_unit_test_setup_teardown(test_refcnt_clamp, setup_refcnt, teardown),
		cmocka_unit_test(test_idempotence),
		cmocka_unit_test(test_reserve_growth),
		cmocka_unit_test_setup_teardown(test_random_only_evictable, setup_random, teardown),
		cmocka_unit_test(test_random_deterministic),
		cmocka_unit_test_setup_teardown(test_random_uniform, setup_random, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
