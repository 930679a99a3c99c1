/* make bench-sampling: the shared sampler and eviction policies in a cache
 * simulator (no I/O), replaying JOADER's appendix A.2 (Table 2), and the
 * sampling tree's operation costs of appendix A.4.
 *
 *   bench_sampling misses OUT.csv   misses vs cache size (slots of one item)
 *   bench_sampling tree OUT.csv [NJOBS]
 *                                   insert / sample / delete costs with
 *                                   NJOBS (128) datasets of 1-2M items
 *
 * Every job reads its dataset for one epoch; all jobs read in lock step (one
 * item each per round; a job whose epoch is over stops). ISA: every job draws
 * from its own shuffle; DSA: one dependent round for all jobs. A read of an
 * item not in the cache is a miss and brings it in, evicting by the policy;
 * RefCnt's count is the number of jobs that still need the item this epoch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlshim/dsa.h"
#include "evict.h"

#define MAXJOBS 8

static uint64_t rng_state = 42;
static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void *xcalloc(size_t n, size_t s)
{
	void *p = calloc(n ? n : 1, s);
	if (p == NULL) {
		fprintf(stderr, "bench_sampling: out of memory\n");
		exit(1);
	}
	return p;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- Table 2 ---------------------------------------------------------------- */

struct tcase {
	const char *group, *name;
	int njobs;
	uint32_t lo[MAXJOBS], hi[MAXJOBS]; /* range [lo, hi), or sampled when hi == 0 */
};

/* sample([0, 13333], 10000) four times when hi == 0 */
static const struct tcase CASES[] = {
	{"overlap", "D2=0..1e4", 2, {0, 0}, {10000, 10000}},
	{"overlap", "D2=7500..17500", 2, {0, 7500}, {10000, 17500}},
	{"overlap", "D2=5000..15000", 2, {0, 5000}, {10000, 15000}},
	{"overlap", "D2=2500..12500", 2, {0, 2500}, {10000, 12500}},
	{"overlap", "4x sample 1e4 of 13333", 4, {0}, {0}},
	{"size", "D2=0..1e4", 2, {0, 0}, {10000, 10000}},
	{"size", "D2=0..7500", 2, {0, 0}, {10000, 7500}},
	{"size", "D2=0..5000", 2, {0, 0}, {10000, 5000}},
	{"size", "D2=0..2500", 2, {0, 0}, {10000, 2500}},
	{"size", "4 sizes 1e4..2500", 4, {0, 0, 0, 0}, {10000, 7500, 5000, 2500}},
};

struct sim {
	int njobs;
	uint32_t universe;
	uint32_t *ds[MAXJOBS], n[MAXJOBS];
	uint8_t *need[MAXJOBS];  /* ISA: not yet drawn this epoch */
	uint32_t *order[MAXJOBS], pos[MAXJOBS];
	uint32_t *refcnt;
	uint8_t *cached;
	uint32_t ncached, slots;
	struct evictor ev;
	uint64_t misses;
};

static void build(struct sim *s, const struct tcase *c, uint64_t seed)
{
	memset(s, 0, sizeof(*s));
	rng_state = seed;
	s->njobs = c->njobs;
	s->universe = 17500;
	for (int j = 0; j < c->njobs; j++) {
		s->ds[j] = xcalloc(s->universe, sizeof(uint32_t));
		if (c->hi[j] == 0) {
			/* a uniform 10000-subset of [0, 13333): partial Fisher-Yates */
			uint32_t *all = xcalloc(13333, sizeof(uint32_t));
			for (uint32_t i = 0; i < 13333; i++)
				all[i] = i;
			for (uint32_t i = 0; i < 10000; i++) {
				uint32_t k = i + (uint32_t)(rnd() % (13333 - i));
				uint32_t t = all[i];
				all[i] = all[k];
				all[k] = t;
				s->ds[j][s->n[j]++] = all[i];
			}
			free(all);
		} else {
			for (uint32_t i = c->lo[j]; i < c->hi[j]; i++)
				s->ds[j][s->n[j]++] = i;
		}
	}
}

static void sim_free(struct sim *s)
{
	for (int j = 0; j < s->njobs; j++) {
		free(s->ds[j]);
		free(s->need[j]);
		free(s->order[j]);
	}
	free(s->refcnt);
	free(s->cached);
	evict_free(&s->ev);
}

static void access_item(struct sim *s, uint32_t it)
{
	if (s->cached[it]) {
		evict_touch(&s->ev, it);
		evict_recount(&s->ev, it, s->refcnt[it]);
		return;
	}
	s->misses++;
	if (s->ncached == s->slots) {
		uint32_t v = evict_victim(&s->ev);
		evict_del(&s->ev, v);
		s->cached[v] = 0;
		s->ncached--;
	}
	s->cached[it] = 1;
	s->ncached++;
	evict_add(&s->ev, it, s->refcnt[it]);
}

/* One epoch of every job; returns the misses. */
static uint64_t run(const struct tcase *c, int dsa, enum dlshim_evict policy, uint32_t slots, uint64_t seed)
{
	struct sim s;
	build(&s, c, seed);
	s.slots = slots;
	s.refcnt = xcalloc(s.universe, sizeof(uint32_t));
	s.cached = xcalloc(s.universe, 1);
	evict_init(&s.ev, policy, seed);
	evict_reserve(&s.ev, s.universe);
	for (int j = 0; j < s.njobs; j++) {
		s.need[j] = xcalloc(s.universe, 1);
		for (uint32_t i = 0; i < s.n[j]; i++) {
			s.need[j][s.ds[j][i]] = 1;
			s.refcnt[s.ds[j][i]]++;
		}
	}
	struct dlshim_dsa *d = NULL;
	int slot[MAXJOBS] = {0};
	if (dsa) {
		d = dlshim_dsa_create(seed);
		for (uint32_t i = 0; i < s.universe; i++)
			dlshim_dsa_item(d, 0, i); /* index i is item i */
		for (int j = 0; j < s.njobs; j++)
			slot[j] = dlshim_dsa_job_add(d, s.ds[j], s.n[j]);
	} else {
		for (int j = 0; j < s.njobs; j++) {
			s.order[j] = xcalloc(s.n[j], sizeof(uint32_t));
			memcpy(s.order[j], s.ds[j], s.n[j] * sizeof(uint32_t));
			for (uint32_t i = s.n[j]; i > 1; i--) {
				uint32_t k = (uint32_t)(rnd() % i), t = s.order[j][i - 1];
				s.order[j][i - 1] = s.order[j][k];
				s.order[j][k] = t;
			}
		}
	}
	for (uint32_t round = 0;; round++) {
		struct dlshim_dsa_mask who = {{0, 0}};
		uint32_t pick[MAXJOBS], out[DLSHIM_DSA_MAX_JOBS];
		int any = 0;
		for (int j = 0; j < s.njobs; j++)
			any |= round < s.n[j];
		if (!any)
			break;
		if (dsa) {
			for (int j = 0; j < s.njobs; j++)
				if (round < s.n[j])
					who.w[0] |= 1ULL << slot[j];
			dlshim_dsa_round(d, who, out);
		}
		/* every job's read counts down its need before the cache sees it */
		for (int j = 0; j < s.njobs; j++) {
			if (round >= s.n[j])
				continue;
			pick[j] = dsa ? out[slot[j]] : s.order[j][round];
			s.refcnt[pick[j]]--;
		}
		for (int j = 0; j < s.njobs; j++)
			if (round < s.n[j])
				access_item(&s, pick[j]);
	}
	uint64_t m = s.misses;
	dlshim_dsa_destroy(d);
	sim_free(&s);
	return m;
}

static uint32_t union_size(const struct tcase *c, uint64_t seed, uint64_t *sum)
{
	struct sim s;
	build(&s, c, seed);
	uint8_t *u = xcalloc(s.universe, 1);
	uint32_t n = 0;
	*sum = 0;
	for (int j = 0; j < s.njobs; j++) {
		*sum += s.n[j];
		for (uint32_t i = 0; i < s.n[j]; i++)
			n += !u[s.ds[j][i]]++;
	}
	free(u);
	sim_free(&s);
	return n;
}

static int misses_main(const char *path)
{
	static const uint32_t SIZES[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1500, 2000, 2500, 3000, 4000,
					 5000, 6000, 7000, 7500, 8000, 9000, 10000};
	static const enum dlshim_evict POL[] = {DLSHIM_EVICT_REFCNT, DLSHIM_EVICT_LRU, DLSHIM_EVICT_FIFO,
						DLSHIM_EVICT_RANDOM};
	static const char *const PNAME[] = {"refcnt", "lru", "fifo", "random"};
	FILE *f = fopen(path, "w");
	if (f == NULL) {
		perror(path);
		return 1;
	}
	fprintf(f, "group,case,jobs,sampler,policy,cache_slots,misses,min_misses,max_misses\n");
	const uint64_t seed = 7;
	for (size_t c = 0; c < sizeof(CASES) / sizeof(CASES[0]); c++) {
		uint64_t sum;
		uint32_t uni = union_size(&CASES[c], seed, &sum);
		for (size_t z = 0; z < sizeof(SIZES) / sizeof(SIZES[0]); z++)
			for (int dsa = 0; dsa < 2; dsa++)
				/* all policies for the 4-job cases (Figure 12), RefCnt elsewhere */
				for (size_t p = 0; p < (CASES[c].njobs == 4 ? 4u : 1u); p++) {
					uint64_t m = run(&CASES[c], dsa, POL[p], SIZES[z], seed);
					fprintf(f, "%s,%s,%d,%s,%s,%u,%llu,%u,%llu\n", CASES[c].group, CASES[c].name,
						CASES[c].njobs, dsa ? "dsa" : "isa", PNAME[p], SIZES[z],
						(unsigned long long)m, uni, (unsigned long long)sum);
				}
		fprintf(stderr, "  %s %s done\n", CASES[c].group, CASES[c].name);
	}
	fclose(f);
	return 0;
}

/* ---- A.4: tree operation costs ------------------------------------------------ */

/* Every job reads all its queued draws. */
static void drain(struct dlshim_dsa *d, const int *slots, int n)
{
	for (int j = 0; j < n; j++)
		while (dlshim_dsa_queued(d, slots[j]))
			dlshim_dsa_next(d, slots[j], 0);
}

struct phase {
	double sum, max;
};

/* Remove slots[from..to) one by one, timing each. */
static void remove_lazily(struct dlshim_dsa *d, const int *slots, int from, int to, struct phase *p)
{
	p->sum = p->max = 0;
	for (int j = from; j < to; j++) {
		double t = now();
		dlshim_dsa_job_remove(d, slots[j]);
		t = now() - t;
		p->sum += t;
		p->max = t > p->max ? t : p->max;
	}
}

struct rounds_cost {
	double per_item, max; /* seconds */
};

/* `rounds` rounds of all of slots[from..to). */
static struct rounds_cost rounds_of(struct dlshim_dsa *d, const int *slots, int from, int to, int rounds)
{
	struct dlshim_dsa_mask who = {{0, 0}};
	for (int j = from; j < to; j++)
		who.w[slots[j] / 64] |= 1ULL << (slots[j] % 64);
	uint32_t out[DLSHIM_DSA_MAX_JOBS];
	uint64_t drawn = 0;
	struct rounds_cost c = {0, 0};
	double total = 0;
	for (int r = 0; r < rounds; r++) {
		double t = now();
		drawn += dlshim_dsa_round(d, who, out);
		t = now() - t;
		total += t;
		c.max = t > c.max ? t : c.max;
	}
	c.per_item = drawn ? total / (double)drawn : 0;
	return c;
}

static int tree_main(const char *path, int njobs)
{
	const uint32_t universe = 4000000;
	rng_state = 99;
	struct dlshim_dsa *d = dlshim_dsa_create(1);
	for (uint32_t i = 0; i < universe; i++)
		if (dlshim_dsa_item(d, 0, i) != i) {
			fprintf(stderr, "bench_sampling: item index mismatch\n");
			return 1;
		}
	uint32_t *buf = xcalloc(2000000, sizeof(uint32_t));
	double ins = 0, ins_max = 0;
	uint64_t ins_items = 0;
	int slots[DLSHIM_DSA_MAX_JOBS];
	for (int j = 0; j < njobs; j++) {
		/* a contiguous range: datasets that are directory trees of one store */
		uint32_t len = 1000000 + (uint32_t)(rnd() % 1000001);
		uint32_t lo = (uint32_t)(rnd() % (universe - len));
		for (uint32_t i = 0; i < len; i++)
			buf[i] = lo + i;
		double t = now();
		slots[j] = dlshim_dsa_job_add(d, buf, len);
		t = now() - t;
		if (slots[j] < 0) {
			fprintf(stderr, "bench_sampling: insert failed\n");
			return 1;
		}
		ins += t;
		ins_max = t > ins_max ? t : ins_max;
		ins_items += len;
	}
	uint32_t cells = dlshim_dsa_ncells(d);
	/* rounds of all jobs */
	struct dlshim_dsa_mask all = {{0, 0}};
	for (int j = 0; j < njobs; j++)
		all.w[slots[j] / 64] |= 1ULL << (slots[j] % 64);
	uint32_t out[DLSHIM_DSA_MAX_JOBS];
	uint64_t drawn = 0;
	double t = now();
	int rounds = 2000;
	for (int r = 0; r < rounds; r++)
		drawn += dlshim_dsa_round(d, all, out);
	double samp = now() - t;
	uint32_t cells_rounds = dlshim_dsa_ncells(d);
	/* one job alone (a fast job's partial sampling) */
	struct dlshim_dsa_mask one = {{1ULL << slots[0], 0}};
	t = now();
	for (int r = 0; r < rounds; r++)
		dlshim_dsa_round(d, one, out);
	double alone = (now() - t) / rounds;
	/* Deletion, in quarters of the jobs. Queues are drained first (the jobs
	 * read their draws), so the times are the tree's.
	 *  1. remove a quarter lazily (marked dead) with rounds never sweeping:
	 *     rounds of the rest walk cells still split by the dead jobs; then
	 *     one explicit sweep, and rounds again;
	 *  2. remove the next quarter lazily with the default policy: a round
	 *     sweeps once rounds have walked DLSHIM_DSA_SWEEP_RATIO x the cells;
	 *  3. remove the last half with a sweep right after each removal (what
	 *     deletion cost when it merged cells at once). */
	drain(d, slots, njobs);
	int q1 = njobs / 4, q2 = njobs / 2, rounds2 = 400;
	struct phase ph1, ph2;
	dlshim_dsa_set_sweep_ratio(d, 0);
	remove_lazily(d, slots, 0, q1, &ph1);
	uint32_t cells_lazy = dlshim_dsa_ncells(d);
	struct rounds_cost dead_rounds = rounds_of(d, slots, q1, njobs, rounds2);
	t = now();
	if (dlshim_dsa_compact(d) < 0) {
		fprintf(stderr, "bench_sampling: compact failed\n");
		return 1;
	}
	double sweep = now() - t;
	uint32_t cells_swept = dlshim_dsa_ncells(d);
	struct rounds_cost swept_rounds = rounds_of(d, slots, q1, njobs, rounds2);
	dlshim_dsa_set_sweep_ratio(d, DLSHIM_DSA_SWEEP_RATIO);
	drain(d, slots + q1, njobs - q1);
	remove_lazily(d, slots, q1, q2, &ph2);
	uint32_t cells_lazy2 = dlshim_dsa_ncells(d);
	struct rounds_cost auto_rounds = rounds_of(d, slots, q2, njobs, rounds2);
	uint32_t cells_auto = dlshim_dsa_ncells(d);
	drain(d, slots + q2, njobs - q2);
	double eager = 0, eager_max = 0;
	for (int j = q2; j < njobs; j++) {
		t = now();
		dlshim_dsa_job_remove(d, slots[j]);
		dlshim_dsa_compact(d);
		t = now() - t;
		eager += t;
		eager_max = t > eager_max ? t : eager_max;
	}
	FILE *f = fopen(path, "w");
	if (f == NULL) {
		perror(path);
		return 1;
	}
	fprintf(f, "metric,value,unit\n");
	fprintf(f, "datasets,%d,\n", njobs);
	fprintf(f, "mean_dataset_items,%.0f,items\n", (double)ins_items / njobs);
	fprintf(f, "cells_after_insert,%u,\n", cells);
	fprintf(f, "insert_mean,%.4f,s\n", ins / njobs);
	fprintf(f, "insert_max,%.4f,s\n", ins_max);
	fprintf(f, "rounds,%d,\n", rounds);
	fprintf(f, "cells_after_rounds,%u,\n", cells_rounds);
	fprintf(f, "sample_per_item,%.3f,us\n", samp / (double)drawn * 1e6);
	fprintf(f, "round_all_jobs,%.1f,us\n", samp / rounds * 1e6);
	fprintf(f, "round_one_job,%.2f,us\n", alone * 1e6);
	fprintf(f, "delete_mean,%.9f,s\n", (ph1.sum + ph2.sum) / (q2 ? q2 : 1));
	fprintf(f, "delete_max,%.9f,s\n", ph1.max > ph2.max ? ph1.max : ph2.max);
	fprintf(f, "deleted_lazily,%d,\n", q2);
	fprintf(f, "cells_after_lazy_deletes,%u,\n", cells_lazy);
	fprintf(f, "sample_per_item_dead_cells,%.3f,us\n", dead_rounds.per_item * 1e6);
	fprintf(f, "round_dead_cells_max,%.1f,us\n", dead_rounds.max * 1e6);
	fprintf(f, "sweep,%.6f,s\n", sweep);
	fprintf(f, "sweep_jobs,%d,\n", q1);
	fprintf(f, "cells_after_sweep,%u,\n", cells_swept);
	fprintf(f, "sample_per_item_after_sweep,%.3f,us\n", swept_rounds.per_item * 1e6);
	fprintf(f, "round_after_sweep_max,%.1f,us\n", swept_rounds.max * 1e6);
	fprintf(f, "cells_before_auto_sweep,%u,\n", cells_lazy2);
	fprintf(f, "sample_per_item_auto_sweep,%.3f,us\n", auto_rounds.per_item * 1e6);
	fprintf(f, "round_auto_sweep_max,%.1f,us\n", auto_rounds.max * 1e6);
	fprintf(f, "cells_after_auto_sweep,%u,\n", cells_auto);
	fprintf(f, "rounds_after_deletes,%d,\n", rounds2);
	fprintf(f, "delete_and_sweep_mean,%.6f,s\n", eager / (njobs - q2));
	fprintf(f, "delete_and_sweep_max,%.6f,s\n", eager_max);
	fclose(f);
	free(buf);
	dlshim_dsa_destroy(d);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "misses") == 0)
		return misses_main(argv[2]);
	if (argc >= 3 && strcmp(argv[1], "tree") == 0) {
		int n = argc >= 4 ? atoi(argv[3]) : 128;
		if (n < 1 || n > DLSHIM_DSA_MAX_JOBS) {
			fprintf(stderr, "bench_sampling: NJOBS must be 1..%d\n", DLSHIM_DSA_MAX_JOBS);
			return 2;
		}
		return tree_main(argv[2], n);
	}
	fprintf(stderr, "usage: bench_sampling misses OUT.csv | tree OUT.csv [NJOBS]\n");
	return 2;
}
