/* Unit tests of the dependent sampling tree (engine/dsa.c): every job's
 * stream is a sequence of permutations of its dataset and uniformly random
 * (chi-square at a fixed significance, seeded so runs are reproducible);
 * two jobs share an item with probability |I|/max(|D1|,|D2|); insertion,
 * deletion, compensation and partial sampling keep the structure sound. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlshim/dsa.h"

#define NONE DLSHIM_DSA_NONE
#define MAXJ 8
#define MAXU 256

/* Upper critical value of chi-square with k degrees of freedom at
 * significance 0.001 (Wilson-Hilferty; z = 3.0902). */
static double chi2_crit(int k)
{
	double a = 2.0 / (9.0 * k);
	double t = 1.0 - a + 3.0902 * sqrt(a);
	return k * t * t * t;
}

static double chi2(const uint32_t *cnt, const uint32_t *items, uint32_t n)
{
	double total = 0, x = 0;
	for (uint32_t i = 0; i < n; i++)
		total += cnt[items[i]];
	double e = total / n;
	for (uint32_t i = 0; i < n; i++)
		x += (cnt[items[i]] - e) * (cnt[items[i]] - e) / e;
	return x;
}

static void check(struct dlshim_dsa *d)
{
	char err[256] = "";
	int rc = dlshim_dsa_check(d, err, sizeof(err));
	if (rc != 0)
		fail_msg("invariant: %s", err);
}

/* ---- a test rig: datasets over items 0..U-1 and what each job drew ---- */

struct tjob {
	int slot;
	uint32_t items[MAXU], n;
	uint8_t in[MAXU], drawn[MAXU]; /* drawn: in the running epoch */
	uint32_t ndrawn, epochs;
	/* item counts at two positions of an epoch: first and middle draw */
	uint32_t first[MAXU], mid[MAXU];
};

struct rig {
	struct dlshim_dsa *d;
	uint32_t id[MAXU]; /* dsa index of test item i */
	uint32_t back[MAXU];
	struct tjob j[MAXJ];
	int nj;
};

static void rig_init(struct rig *r, uint64_t seed)
{
	memset(r, 0, sizeof(*r));
	r->d = dlshim_dsa_create(seed);
	assert_non_null(r->d);
	for (uint32_t i = 0; i < MAXU; i++) {
		r->id[i] = dlshim_dsa_item(r->d, 7, 1000 + i);
		assert_int_equal(r->id[i], i); /* dense, in order of first sight */
		r->back[r->id[i]] = i;
	}
	assert_int_equal(dlshim_dsa_item(r->d, 7, 1000), 0); /* same file, same index */
}

static int rig_add(struct rig *r, const uint32_t *items, uint32_t n)
{
	struct tjob *t = &r->j[r->nj];
	memset(t, 0, sizeof(*t));
	uint32_t ids[MAXU];
	for (uint32_t i = 0; i < n; i++) {
		ids[i] = r->id[items[i]];
		t->items[i] = items[i];
		t->in[items[i]] = 1;
	}
	t->n = n;
	t->slot = dlshim_dsa_job_add(r->d, ids, n);
	assert_true(t->slot >= 0);
	check(r->d);
	return r->nj++;
}

static void range(uint32_t *a, uint32_t lo, uint32_t hi, uint32_t *n)
{
	*n = 0;
	for (uint32_t i = lo; i < hi; i++)
		a[(*n)++] = i;
}

/* Record a draw of job k: must be an undrawn member of its dataset. */
static void note(struct rig *r, int k, uint32_t dsa_item)
{
	struct tjob *t = &r->j[k];
	assert_true(dsa_item < MAXU);
	uint32_t it = r->back[dsa_item];
	if (!t->in[it])
		fail_msg("job %d drew item %u outside its dataset", k, it);
	if (t->drawn[it])
		fail_msg("job %d drew item %u twice in epoch %u", k, it, t->epochs);
	if (t->ndrawn == 0)
		t->first[it]++;
	if (t->ndrawn == t->n / 2)
		t->mid[it]++;
	t->drawn[it] = 1;
	if (++t->ndrawn == t->n) {
		memset(t->drawn, 0, sizeof(t->drawn));
		t->ndrawn = 0;
		t->epochs++;
	}
}

static void uniform(struct rig *r, int k)
{
	struct tjob *t = &r->j[k];
	double crit = chi2_crit((int)t->n - 1);
	double a = chi2(t->first, t->items, t->n), b = chi2(t->mid, t->items, t->n);
	if (a > crit || b > crit)
		fail_msg("job %d not uniform: chi2 first %.1f, middle %.1f, critical %.1f (%u epochs)", k, a, b, crit,
			 t->epochs);
}

/* Remaining sizes as the test sees them (a full epoch when all drawn). */
static uint32_t remaining(const struct tjob *t) { return t->ndrawn ? t->n - t->ndrawn : t->n; }

static uint32_t common_remaining(const struct tjob *a, const struct tjob *b)
{
	uint32_t c = 0;
	for (uint32_t i = 0; i < MAXU; i++)
		c += a->in[i] && b->in[i] && (a->ndrawn == 0 || !a->drawn[i]) && (b->ndrawn == 0 || !b->drawn[i]);
	return c;
}

/* Rounds with all jobs; for two jobs, the number of shared draws must match
 * the sum over rounds of |R1 ∩ R2| / max(|R1|, |R2|) for the remaining
 * sets before each round. */
static void run_rounds(struct rig *r, uint32_t rounds)
{
	struct dlshim_dsa_mask all = {{0, 0}};
	for (int k = 0; k < r->nj; k++)
		all.w[r->j[k].slot / 64] |= 1ULL << (r->j[k].slot % 64);
	double expect = 0, var = 0;
	uint32_t same = 0;
	for (uint32_t n = 0; n < rounds; n++) {
		if (r->nj == 2) {
			double m = remaining(&r->j[0]) > remaining(&r->j[1]) ? remaining(&r->j[0]) : remaining(&r->j[1]);
			double p = common_remaining(&r->j[0], &r->j[1]) / m;
			expect += p;
			var += p * (1 - p);
		}
		uint32_t out[DLSHIM_DSA_MAX_JOBS];
		assert_int_equal(dlshim_dsa_round(r->d, all, out), r->nj);
		for (int k = 0; k < r->nj; k++)
			note(r, k, out[r->j[k].slot]);
		same += r->nj == 2 && out[r->j[0].slot] == out[r->j[1].slot];
		if (n % 997 == 0)
			check(r->d);
	}
	check(r->d);
	if (r->nj == 2 && fabs(same - expect) > 5 * sqrt(var) + 1)
		fail_msg("shared draws %u, expected %.1f (sd %.1f)", same, expect, sqrt(var));
	for (int k = 0; k < r->nj; k++)
		uniform(r, k);
}

/* ---- the statistic can fail ------------------------------------------------ */

static void test_chi2_rejects_bias(void **state)
{
	(void)state;
	uint32_t items[40], cnt[40] = {0}, n;
	range(items, 0, 40, &n);
	uint64_t s = 1;
	for (int i = 0; i < 8000; i++) {
		/* min of two uniform draws: biased toward small items */
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		uint32_t a = (uint32_t)(s >> 33) % 40;
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		uint32_t b = (uint32_t)(s >> 33) % 40;
		cnt[a < b ? a : b]++;
	}
	assert_true(chi2(cnt, items, n) > chi2_crit(39));
	assert_true(chi2_crit(39) > 72.0 && chi2_crit(39) < 73.0); /* table: 72.05 */
}

/* ---- two jobs ----------------------------------------------------------------- */

static void two_jobs(uint64_t seed, uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1, uint32_t rounds)
{
	struct rig *r = malloc(sizeof(*r));
	assert_non_null(r);
	rig_init(r, seed);
	uint32_t a[MAXU], b[MAXU], na, nb;
	range(a, a0, a1, &na);
	range(b, b0, b1, &nb);
	rig_add(r, a, na);
	rig_add(r, b, nb);
	run_rounds(r, rounds);
	dlshim_dsa_destroy(r->d);
	free(r);
}

static void test_two_equal(void **state)
{
	(void)state;
	two_jobs(11, 0, 40, 0, 40, 40 * 1500);
}

static void test_two_nested(void **state)
{
	(void)state;
	two_jobs(12, 0, 30, 0, 60, 60 * 1000);
}

static void test_two_partial(void **state)
{
	(void)state;
	two_jobs(13, 0, 40, 20, 60, 40 * 1500);
	two_jobs(14, 0, 40, 10, 80, 70 * 900);
}

static void test_two_disjoint(void **state)
{
	(void)state;
	two_jobs(15, 0, 30, 30, 70, 30 * 1000);
}

/* The first round of fresh jobs: shared with probability |I|/max. */
static void first_round(uint32_t a1, uint32_t b0, uint32_t b1)
{
	const uint32_t trials = 6000;
	uint32_t same = 0;
	uint32_t a[MAXU], b[MAXU], na, nb;
	range(a, 0, a1, &na);
	range(b, b0, b1, &nb);
	for (uint32_t t = 0; t < trials; t++) {
		struct dlshim_dsa *d = dlshim_dsa_create(1000 + t);
		for (uint32_t i = 0; i < MAXU; i++)
			dlshim_dsa_item(d, 1, i);
		int x = dlshim_dsa_job_add(d, a, na), y = dlshim_dsa_job_add(d, b, nb);
		assert_true(x >= 0 && y >= 0);
		same += dlshim_dsa_next(d, x, 1) == dlshim_dsa_next(d, y, 1);
		dlshim_dsa_destroy(d);
	}
	uint32_t inter = (a1 > b0 ? (a1 < b1 ? a1 : b1) - b0 : 0);
	double p = (double)inter / (na > nb ? na : nb);
	double sd = sqrt(trials * p * (1 - p));
	if (fabs(same - trials * p) > 5 * sd + 1)
		fail_msg("[0,%u) vs [%u,%u): shared %u of %u, expected %.0f", a1, b0, b1, same, trials, trials * p);
}

static void test_first_round_probability(void **state)
{
	(void)state;
	first_round(100, 0, 100);   /* equal: always */
	first_round(100, 25, 125);  /* |I| = 75 */
	first_round(100, 50, 150);
	first_round(100, 0, 40);    /* nested: 40/100 */
	first_round(60, 20, 120);   /* 40/100 */
}

/* ---- four jobs ------------------------------------------------------------------ */

/* Distinct items per round of four jobs; `isa`: each job alone (independent
 * shuffles), for comparison. */
static double four_jobs_run(uint64_t seed, int kind, int isa)
{
	struct rig *r = malloc(sizeof(*r));
	assert_non_null(r);
	rig_init(r, seed);
	uint64_t s = seed;
	for (int k = 0; k < 4; k++) {
		uint32_t a[MAXU], n = 0;
		if (kind == 0)
			range(a, 0, 48, &n);
		else if (kind == 1)
			range(a, 0, 16 * (uint32_t)(k + 1), &n);
		else
			for (uint32_t i = 0; i < 64; i++) {
				/* about 3/4 of 64 items, like Table 2's sample([0,13333],10000) */
				s = s * 6364136223846793005ULL + 1442695040888963407ULL;
				if ((s >> 40) % 4 != 0)
					a[n++] = i;
			}
		rig_add(r, a, n);
	}
	uint32_t rounds = 64 * 800, distinct = 0;
	struct dlshim_dsa_mask all = {{0xf, 0}};
	for (uint32_t n = 0; n < rounds; n++) {
		uint32_t out[DLSHIM_DSA_MAX_JOBS];
		if (isa)
			for (int k = 0; k < 4; k++)
				assert_int_equal(dlshim_dsa_round(r->d, (struct dlshim_dsa_mask){{1ULL << k, 0}}, out), 1);
		else
			assert_int_equal(dlshim_dsa_round(r->d, all, out), 4);
		for (int k = 0; k < 4; k++) {
			note(r, k, out[k]);
			int dup = 0;
			for (int m = 0; m < k; m++)
				dup |= out[m] == out[k];
			distinct += !dup;
		}
		if (n % 1999 == 0)
			check(r->d);
	}
	check(r->d);
	for (int k = 0; k < 4; k++)
		uniform(r, k);
	dlshim_dsa_destroy(r->d);
	free(r);
	return (double)distinct / rounds;
}

static void four_jobs(uint64_t seed, int kind)
{
	double dsa = four_jobs_run(seed, kind, 0), isa = four_jobs_run(seed, kind, 1);
	print_message("kind %d: distinct items per round: dsa %.3f, independent %.3f\n", kind, dsa, isa);
	if (kind == 0 && dsa != 1.0)
		fail_msg("equal datasets: %.3f distinct items per round, expected 1", dsa);
	/* sharing must read clearly fewer distinct items than independent shuffles */
	if (dsa > 0.85 * isa)
		fail_msg("kind %d: %.3f distinct items per round, independent %.3f", kind, dsa, isa);
}

static void test_four_equal(void **state)
{
	(void)state;
	four_jobs(21, 0);
}

static void test_four_nested(void **state)
{
	(void)state;
	four_jobs(22, 1);
}

static void test_four_overlapping(void **state)
{
	(void)state;
	four_jobs(23, 2);
}

/* ---- partial sampling: jobs at different speeds, through next() ---------- */

static void test_speeds_and_window(void **state)
{
	(void)state;
	struct rig *r = malloc(sizeof(*r));
	assert_non_null(r);
	rig_init(r, 31);
	uint32_t a[MAXU], n;
	range(a, 0, 50, &n);
	rig_add(r, a, n);
	range(a, 10, 60, &n);
	rig_add(r, a, n);
	dlshim_dsa_set_window(r->d, 8);
	uint32_t shared = 0, slow_reads = 0;
	uint32_t fast_at[MAXU];
	memset(fast_at, 0xff, sizeof(fast_at));
	for (uint32_t step = 0; step < 60000; step++) {
		/* job 0 reads three items for each of job 1's */
		uint32_t x = dlshim_dsa_next(r->d, r->j[0].slot, 2);
		assert_int_not_equal(x, NONE);
		note(r, 0, x);
		fast_at[r->back[x]] = step;
		if (step % 3 == 0) {
			uint32_t y = dlshim_dsa_next(r->d, r->j[1].slot, 2);
			assert_int_not_equal(y, NONE); /* never waits for the other */
			note(r, 1, y);
			/* queued at most 8 reads ago: 24 of the fast job's steps */
			shared += fast_at[r->back[y]] != UINT32_MAX && step - fast_at[r->back[y]] <= 30;
			slow_reads++;
		}
		/* the slower job's queue never outgrows the window */
		assert_true(dlshim_dsa_queued(r->d, r->j[1].slot) <= 8);
		if (step % 4999 == 0)
			check(r->d);
	}
	uniform(r, 0);
	uniform(r, 1);
	/* The slow job mostly reads items the fast one drew in the same
	 * rounds: 40 of 50 items in common. */
	if (shared < slow_reads / 2)
		fail_msg("slow job read %u of %u items the fast one had just read", shared, slow_reads);
	check(r->d);
	dlshim_dsa_destroy(r->d);
	free(r);
}

/* ---- insertion and deletion at any time -------------------------------------------- */

static void test_insert_delete(void **state)
{
	(void)state;
	struct rig *r = malloc(sizeof(*r));
	assert_non_null(r);
	rig_init(r, 41);
	uint64_t s = 41;
	int slot_of[MAXJ];
	uint32_t pendsum = 0;
	for (int k = 0; k < MAXJ; k++)
		slot_of[k] = -1;
	/* random inserts (random ranges), deletes and draws; every epoch of
	 * every job still a permutation, the structure always consistent */
	for (int op = 0; op < 3000; op++) {
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		uint32_t v = (uint32_t)(s >> 33);
		int k = (int)(v % MAXJ);
		if (slot_of[k] < 0 && v % 7 == 0) {
			uint32_t lo = (v >> 8) % 150, len = 1 + (v >> 16) % 100, a[MAXU], n;
			range(a, lo, lo + len, &n);
			struct tjob *t = &r->j[k];
			memset(t, 0, sizeof(*t));
			for (uint32_t i = 0; i < n; i++) {
				t->items[i] = a[i];
				t->in[a[i]] = 1;
			}
			t->n = n;
			t->slot = slot_of[k] = dlshim_dsa_job_add(r->d, a, n);
			assert_true(t->slot >= 0);
		} else if (slot_of[k] >= 0 && v % 11 == 0) {
			dlshim_dsa_job_remove(r->d, slot_of[k]);
			assert_false(dlshim_dsa_job_live(r->d, slot_of[k]));
			slot_of[k] = -1;
		} else if (slot_of[k] >= 0) {
			uint32_t x = dlshim_dsa_next(r->d, slot_of[k], 1 + v % 4);
			note(r, k, x);
		}
		check(r->d);
	}
	for (uint32_t i = 0; i < MAXU; i++)
		pendsum += dlshim_dsa_pending(r->d, i);
	uint32_t q = 0;
	for (int k = 0; k < MAXJ; k++)
		q += slot_of[k] >= 0 ? dlshim_dsa_queued(r->d, slot_of[k]) : 0;
	assert_int_equal(pendsum, q);
	for (int k = 0; k < MAXJ; k++)
		if (slot_of[k] >= 0)
			dlshim_dsa_job_remove(r->d, slot_of[k]);
	check(r->d);
	for (uint32_t i = 0; i < MAXU; i++)
		assert_int_equal(dlshim_dsa_needed(r->d, i), 0); /* dead jobs need nothing */
	assert_int_equal(dlshim_dsa_compact(r->d), 0);
	assert_int_equal(dlshim_dsa_ndead(r->d), 0);
	check(r->d);
	assert_int_equal(dlshim_dsa_ncells(r->d), 1); /* all merged back to "nobody" */
	dlshim_dsa_destroy(r->d);
	free(r);
}

/* Lazy deletion: hundreds of short jobs come and go (so every slot is used,
 * dies, and is swept and reused several times) while two long jobs sample
 * through it all. The long jobs' epochs stay permutations, their draws
 * uniform, the two still share as often as the bound allows, and the
 * structure is sound in every state: dead bits pending, swept, reused.
 * ratio 0: only running out of slots sweeps; else rounds sweep too. */
static void many_deletions(uint64_t seed, uint32_t ratio)
{
	struct rig *r = malloc(sizeof(*r));
	assert_non_null(r);
	rig_init(r, seed);
	dlshim_dsa_set_sweep_ratio(r->d, ratio);
	uint32_t a[MAXU], n;
	range(a, 0, 40, &n);
	rig_add(r, a, n);
	range(a, 20, 60, &n);
	rig_add(r, a, n);
	int shortj[16], nshort = 0, sweeps = 0, add_sweeps = 0;
	uint32_t removed = 0, same = 0, both = 0, dead = 0;
	uint64_t s = seed;
	double expect = 0;
	for (uint32_t round = 0; round < 40 * 1500; round++) {
		s = s * 6364136223846793005ULL + 1442695040888963407ULL;
		uint32_t v = (uint32_t)(s >> 33);
		if (round % 7 == 0) {
			/* one short job ends, one begins (overlapping the long ones) */
			if (nshort == 16) {
				int k = (int)(v % 16);
				dlshim_dsa_job_remove(r->d, shortj[k]);
				assert_false(dlshim_dsa_job_live(r->d, shortj[k]));
				shortj[k] = shortj[--nshort];
				removed++;
			}
			uint32_t before = dlshim_dsa_ndead(r->d);
			uint32_t lo = (v >> 8) % 200, len = 1 + (v >> 16) % 50;
			range(a, lo, lo + len, &n);
			shortj[nshort] = dlshim_dsa_job_add(r->d, a, n);
			assert_true(shortj[nshort] >= 0); /* a slot is always found */
			add_sweeps += dlshim_dsa_ndead(r->d) < before;
			nshort++;
		}
		/* the long jobs draw with a random half of the short ones, or
		 * (every third round) alone, where their sharing is pinned down */
		int pair = round % 3 == 0;
		struct dlshim_dsa_mask who = {{0, 0}};
		for (int k = 0; k < 2; k++)
			who.w[r->j[k].slot / 64] |= 1ULL << (r->j[k].slot % 64);
		for (int k = 0; k < nshort && !pair; k++)
			if ((v >> k) & 1)
				who.w[shortj[k] / 64] |= 1ULL << (shortj[k] % 64);
		double m = remaining(&r->j[0]) > remaining(&r->j[1]) ? remaining(&r->j[0]) : remaining(&r->j[1]);
		double p = common_remaining(&r->j[0], &r->j[1]) / m;
		uint32_t out[DLSHIM_DSA_MAX_JOBS];
		dlshim_dsa_round(r->d, who, out);
		for (int k = 0; k < 2; k++)
			note(r, k, out[r->j[k].slot]);
		if (pair) {
			expect += p;
			both++;
			same += out[r->j[0].slot] == out[r->j[1].slot];
		}
		for (int k = 0; k < 2; k++) /* queues grow otherwise; the test reads from out */
			while (dlshim_dsa_queued(r->d, r->j[k].slot))
				dlshim_dsa_next(r->d, r->j[k].slot, 0);
		for (int k = 0; k < nshort; k++)
			while (dlshim_dsa_queued(r->d, shortj[k]))
				dlshim_dsa_next(r->d, shortj[k], 0);
		sweeps += dlshim_dsa_ndead(r->d) < dead;
		dead = dlshim_dsa_ndead(r->d);
		if (round % 101 == 0)
			check(r->d);
	}
	check(r->d);
	assert_true(removed > 3 * DLSHIM_DSA_MAX_JOBS);
	if (ratio == 0)
		assert_true(add_sweeps >= 3); /* every slot used, dead and swept */
	else
		assert_true(sweeps > 100 && add_sweeps == 0); /* rounds sweep early */
	for (int k = 0; k < 2; k++) {
		assert_true(r->j[k].epochs > 1000);
		uniform(r, k);
	}
	assert_true(both > 10000);
	if (fabs(same - expect) > 5 * sqrt(expect) + 1)
		fail_msg("shared draws %u in %u lone rounds, expected %.1f", same, both, expect);
	dlshim_dsa_destroy(r->d);
	free(r);
}

static void test_many_deletions(void **state)
{
	(void)state;
	many_deletions(43, 0);
	many_deletions(44, DLSHIM_DSA_SWEEP_RATIO);
}

/* Added mid-epoch, an item is needed in the current epoch. */
static void test_extend(void **state)
{
	(void)state;
	struct dlshim_dsa *d = dlshim_dsa_create(5);
	for (uint32_t i = 0; i < 10; i++)
		dlshim_dsa_item(d, 1, i);
	uint32_t a[] = {0, 1, 2, 3, 4}, b[] = {5, 6, 4};
	int j = dlshim_dsa_job_add(d, a, 5);
	uint32_t got = 0;
	got |= 1u << dlshim_dsa_next(d, j, 1);
	got |= 1u << dlshim_dsa_next(d, j, 1);
	assert_int_equal(dlshim_dsa_job_extend(d, j, b, 3), 0);
	assert_int_equal(dlshim_dsa_job_size(d, j), 7);
	for (int k = 0; k < 5; k++)
		got |= 1u << dlshim_dsa_next(d, j, 1);
	assert_int_equal(got, 0x7f);
	assert_int_equal(dlshim_dsa_job_epoch(d, j), 1);
	dlshim_dsa_next(d, j, 1);
	assert_int_equal(dlshim_dsa_job_epoch(d, j), 2);
	char err[128];
	assert_int_equal(dlshim_dsa_check(d, err, sizeof(err)), 0);
	dlshim_dsa_destroy(d);
}

/* ---- refcounts ---------------------------------------------------------------------- */

static void test_needed_counts(void **state)
{
	(void)state;
	struct dlshim_dsa *d = dlshim_dsa_create(6);
	for (uint32_t i = 0; i < 4; i++)
		dlshim_dsa_item(d, 1, i);
	uint32_t a[] = {0, 1, 2}, b[] = {1, 2, 3};
	int x = dlshim_dsa_job_add(d, a, 3), y = dlshim_dsa_job_add(d, b, 3);
	assert_int_equal(dlshim_dsa_needed(d, 0), 1);
	assert_int_equal(dlshim_dsa_needed(d, 1), 2);
	dlshim_dsa_set_window(d, 0); /* y never drawn for */
	uint32_t it = dlshim_dsa_next(d, x, 2);       /* x draws two, reads one */
	uint32_t queued = dlshim_dsa_peek(d, x, 0);
	assert_int_equal(dlshim_dsa_pending(d, it), 0);
	assert_int_equal(dlshim_dsa_pending(d, queued), 1);
	/* still needed by y if in b; the queued one still needed by x */
	assert_int_equal(dlshim_dsa_needed(d, it), it != 0);
	assert_int_equal(dlshim_dsa_needed(d, queued), 1 + (queued != 0));
	dlshim_dsa_job_remove(d, y);
	assert_int_equal(dlshim_dsa_needed(d, 3), 0);
	dlshim_dsa_destroy(d);
}

/* ---- bad input --------------------------------------------------------------------- */

static void test_bad_input(void **state)
{
	(void)state;
	struct dlshim_dsa *d = dlshim_dsa_create(7);
	uint32_t a[] = {0, 0, 99};
	assert_int_equal(dlshim_dsa_job_add(d, a, 3), -1); /* no known items: empty */
	dlshim_dsa_item(d, 1, 1);
	int first = -1;
	for (int k = 0; k < DLSHIM_DSA_MAX_JOBS; k++) {
		int j = dlshim_dsa_job_add(d, a, 3);
		assert_int_equal(j, k);
		first = first < 0 ? j : first;
	}
	assert_int_equal(dlshim_dsa_job_add(d, a, 3), -1); /* all slots taken */
	assert_int_equal(dlshim_dsa_job_size(d, first), 1);
	for (int k = 0; k < DLSHIM_DSA_MAX_JOBS; k++)
		assert_int_equal(dlshim_dsa_next(d, k, 1), 0); /* 128 jobs share item 0 */
	assert_int_equal(dlshim_dsa_needed(d, 0), 0); /* every job read it this epoch */
	assert_int_equal(dlshim_dsa_next(d, 0, 1), 0);  /* a round for all: next epoch */
	assert_int_equal(dlshim_dsa_needed(d, 0), DLSHIM_DSA_MAX_JOBS - 1);
	assert_int_equal(dlshim_dsa_job_epoch(d, 5), 2);
	assert_int_equal(dlshim_dsa_next(d, -1, 1), NONE);
	assert_int_equal(dlshim_dsa_next(d, DLSHIM_DSA_MAX_JOBS, 1), NONE);
	dlshim_dsa_job_remove(d, 3);
	assert_int_equal(dlshim_dsa_next(d, 3, 1), NONE);
	assert_int_equal(dlshim_dsa_job_extend(d, 3, a, 1), -1);
	char err[128];
	assert_int_equal(dlshim_dsa_check(d, err, sizeof(err)), 0);
	dlshim_dsa_destroy(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chi2_rejects_bias),
		cmocka_unit_test(test_two_equal),
		cmocka_unit_test(test_two_nested),
		cmocka_unit_test(test_two_partial),
		cmocka_unit_test(test_two_disjoint),
		cmocka_unit_test(test_first_round_probability),
		cmocka_unit_test(test_four_equal),
		cmocka_unit_test(test_four_nested),
		cmocka_unit_test(test_four_overlapping),
		cmocka_unit_test(test_speeds_and_window),
		cmocka_unit_test(test_insert_delete),
		cmocka_unit_test(test_many_deletions),
		cmocka_unit_test(test_extend),
		cmocka_unit_test(test_needed_counts),
		cmocka_unit_test(test_bad_input),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
