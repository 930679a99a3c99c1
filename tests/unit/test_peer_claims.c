/* Claims of jobs that span nodes: the authority's rules (claim_table.c),
 * and two engines driven as two nodes of one job, each deciding its own
 * requests in a redirect mode and asking the table before it serves (as
 * the coordinator's handle_open does): each epoch of the job as a whole
 * must serve every file exactly once, from the label group asked for,
 * although both nodes hold the whole dataset in their caches and so keep
 * choosing the same files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../engine/daemon/peers/claim_table.c"
#include "dlshim/engine.h"

static void test_table_rules(void **state)
{
	(void)state;
	struct claim_table *t = claim_table_new();
	assert_non_null(t);
	uint32_t at = 99;
	const uint64_t job = 11, other_job = 12, grp = 0x77, f1 = 0xabcdef, f2 = 0xabcdf0, f3 = 0xabcdf1;
	/* A group of 3 files. */
	assert_int_equal(claim_table_claim(t, job, grp, f1, 3, 0, 0, &at, NULL), 1);
	assert_int_equal(at, 0);
	/* The same node again, same epoch (a lost reply): granted. */
	assert_int_equal(claim_table_claim(t, job, grp, f1, 3, 0, 0, &at, NULL), 1);
	/* Another node, same epoch: refused, naming the epoch that holds it. */
	assert_int_equal(claim_table_claim(t, job, grp, f1, 3, 0, 1, &at, NULL), 0);
	assert_int_equal(at, 0);
	assert_int_equal(claim_table_current(t, job, grp, 0, 0, &at, NULL), 1);
	assert_int_equal(claim_table_claim(t, job, grp, f2, 3, 0, 1, &at, NULL), 1);
	/* The third file completes the group: the epoch turns. */
	assert_int_equal(claim_table_claim(t, job, grp, f3, 3, 0, 1, &at, NULL), 1);
	assert_int_equal(at, 0);
	assert_int_equal(claim_table_current(t, job, grp, 0, 0, &at, NULL), 0);
	assert_int_equal(at, 1);
	/* A node still in epoch 0 asking for f1 gets it in epoch 1. */
	assert_int_equal(claim_table_claim(t, job, grp, f1, 3, 0, 0, &at, NULL), 1);
	assert_int_equal(at, 1);
	assert_int_equal(claim_table_claim(t, job, grp, f1, 3, 1, 1, &at, NULL), 0);
	assert_int_equal(at, 1);
	/* A view ahead of the record (the node saw the group complete): adopted. */
	assert_int_equal(claim_table_claim(t, job, grp, f1, 3, 4, 1, &at, NULL), 1);
	assert_int_equal(at, 4);
	assert_int_equal(claim_table_claim(t, job, grp, f1, 3, 2, 0, &at, NULL), 0);
	assert_int_equal(at, 4);
	/* Another job's claims are its own. */
	assert_int_equal(claim_table_claim(t, other_job, grp, f1, 3, 0, 2, &at, NULL), 1);
	assert_int_equal(at, 0);
	assert_int_equal(claim_table_count(t), 2);
	claim_table_free(t);
}

static void test_table_grows(void **state)
{
	(void)state;
	struct claim_table *t = claim_table_new();
	uint32_t at;
	enum { N = 100000 };
	for (uint64_t f = 0; f < N; f++)
		assert_int_equal(claim_table_claim(t, 5, f % 7, f * 0x9e3779b97f4a7c15ULL, N, 0, 0, &at, NULL), 1);
	assert_int_equal(claim_table_count(t), 7);
	for (uint64_t f = 0; f < N; f++)
		assert_int_equal(claim_table_claim(t, 5, f % 7, f * 0x9e3779b97f4a7c15ULL, N, 0, 1, &at, NULL), 0);
	claim_table_free(t);
}

/* ---- two nodes of one job ---- */

enum { NODES = 2, GROUPS = 2, PER = 24, FILES = GROUPS * PER, EPOCHS = 4 };

struct node {
	void *mem;
	struct dlshim_engine *e;
	int job;
	uint32_t item[FILES];  /* file index -> this engine's item */
};

static struct dlshim_file_id fid(int f) { return (struct dlshim_file_id){7, 1000 + (uint64_t)f, 2000, 5, 0}; }

static int file_of(const struct node *n, uint32_t item)
{
	for (int f = 0; f < FILES; f++)
		if (n->item[f] == item)
			return f;
	return -1;
}

static void finish_loads(struct node *n, int job, const struct dlshim_open_result *res, uint32_t keep, uint64_t *gen)
{
	for (uint32_t k = 0; k < res->nload; k++) {
		uint64_t g = dlshim_engine_load_done(n->e, job, res->load_item[k], 1);
		if (res->load_item[k] == keep && gen)
			*gen = g;
		else if (g)
			dlshim_engine_release(n->e, job, res->load_slot[k], g, 0, 0);
	}
}

static void node_init(struct node *n, int self)
{
	size_t len = 8u << 20;
	n->mem = aligned_alloc(4096, len);
	assert_non_null(n->mem);
	struct dlshim_engine_opts o = {.shm_base = n->mem, .shm_len = len, .evict = DLSHIM_EVICT_REFCNT, .seed = 3};
	n->e = dlshim_engine_create(&o);
	assert_non_null(n->e);
	/* Warm the cache with a part of the dataset, another on each node
	 * (an exact job read it): requests for the other files are served
	 * by stand-ins, which is where the nodes' choices can meet. */
	int warm = dlshim_engine_job_attach(n->e, "warm");
	struct dlshim_open_result res;
	for (int f = self; f < FILES; f += 3) {
		struct dlshim_file_id id = fid(f);
		dlshim_engine_open(n->e, warm, &id, 0, &res);
		assert_int_equal(res.kind, DLSHIM_OPEN_LOAD);
		uint64_t g = dlshim_engine_load_done(n->e, warm, res.item, 1);
		assert_true(g != 0);
		dlshim_engine_release(n->e, warm, res.slot, g, 2000, 0);
	}
	n->job = dlshim_engine_job_attach(n->e, "ddp");
	char path[64], key[64];
	for (int f = 0; f < FILES; f++) {
		struct dlshim_file_id id = fid(f);
		snprintf(path, sizeof(path), "/r/c%d/f%02d.jpg", f / PER, f);
		snprintf(key, sizeof(key), "d:/r/c%d|.jpg", f / PER);
		n->item[f] = dlshim_engine_job_add_file(n->e, n->job, &id, path, key);
	}
	dlshim_engine_job_dataset_done(n->e, n->job, DLSHIM_REDIRECT_DIR, 4);
}

static uint64_t fhash(int f) { return (uint64_t)(f + 1) * 0x9e3779b97f4a7c15ULL; }

/* One request of node `ni` for file `f`, served as the coordinator does
 * (claim_denied in engine/daemon/server.c): decide, claim (or, for a
 * re-open, ask whether its epoch is still current), and decide again while
 * refused. Returns the file served. */
static int serve(struct node *nodes, int ni, int f, struct claim_table *t, int use_sync, int *refusals, int *stale)

{
	struct node *n = &nodes[ni];
	struct dlshim_file_id id = fid(f);
	struct dlshim_open_result res;
	for (int tries = 0; tries < 4 * FILES; tries++) {
		dlshim_engine_open(n->e, n->job, &id, tries ? DLSHIM_OPEN_F_RETRY : 0, &res);
		assert_int_not_equal(res.kind, DLSHIM_OPEN_WAIT);
		uint64_t gen = res.kind == DLSHIM_OPEN_HIT ? res.gen : 0;
		uint32_t slot = res.slot;
		if (res.kind == DLSHIM_OPEN_LOAD)
			gen = dlshim_engine_load_done(n->e, n->job, res.item, 1);
		finish_loads(n, n->job, &res, res.kind == DLSHIM_OPEN_LOAD_CHUNK ? res.item : UINT32_MAX, &gen);
		if (res.kind == DLSHIM_OPEN_LOAD_CHUNK)
			for (uint32_t k = 0; k < res.nload; k++)
				if (res.load_item[k] == res.item)
					slot = res.load_slot[k];
		assert_true(res.decided + res.repeat == 1);
		const char *key;
		uint32_t size, at;
		assert_int_equal(dlshim_engine_item_group(n->e, n->job, res.item, &key, &size), 0);
		assert_int_equal(size, PER);
		uint64_t gh = (uint64_t)(unsigned char)key[strlen(key) - 6]; /* the class digit of "d:/r/cN|.jpg" */
		int sf = file_of(n, res.item), g;
		if (t == NULL) { /* no claims: each node on its own view */
			if (gen)
				dlshim_engine_release(n->e, n->job, slot, gen, 2000, 0);
			return sf;
		}
		uint64_t hashes[8];
		struct claim_sync cs = {hashes, 8, 0};
		if (res.decided)
			g = claim_table_claim(t, 77, gh, fhash(sf), size, res.gepoch, (uint32_t)ni, &at,
					      use_sync ? &cs : NULL);
		else
			g = claim_table_current(t, 77, gh, res.gepoch, (uint32_t)ni, &at, use_sync ? &cs : NULL);
		assert_true(g >= 0);
		assert_true(at >= res.gepoch);
		if (gen)
			dlshim_engine_release(n->e, n->job, slot, gen, g ? 2000 : 0, 0);
		if (g == 1 && at > res.gepoch)
			assert_true(dlshim_engine_group_catch_up(n->e, n->job, res.item, at, 1) == at);
		/* What the other node took meanwhile (as the coordinator applies it). */
		for (uint32_t k = 0; k < cs.n; k++) {
			int of = -1;
			for (int x = 0; x < FILES; x++)
				if (fhash(x) == hashes[k])
					of = x;
			assert_true(of >= 0 && of / PER == sf / PER);
			dlshim_engine_group_catch_up(n->e, n->job, n->item[of], at, 1);
		}
		if (g == 1)
			return sf;
		if (res.decided)
			(*refusals)++;
		else
			(*stale)++;
		assert_true(dlshim_engine_group_catch_up(n->e, n->job, res.item, at, res.decided) != UINT32_MAX);
		assert_int_equal(dlshim_engine_forget_served(n->e, n->job, res.requested), 1);
	}
	fail_msg("request for file %d on node %d was never served", f, ni);
	return -1;
}

/* EPOCHS epochs of the job over two nodes, with claims (1; 2: answers
 * also tell what the other node took) or without (0: each node deciding
 * on its own view). Returns the files served other than once in their
 * epoch, summed over the epochs. */
static int run_epochs(int claims, int *refusals, int *stale)
{
	struct node nodes[NODES];
	for (int i = 0; i < NODES; i++)
		node_init(&nodes[i], i);
	struct claim_table *t = claims ? claim_table_new() : NULL;
	uint64_t seed = 0x5eed;
	int wrong = 0;
	for (int ep = 0; ep < EPOCHS; ep++) {
		/* A shuffled epoch split between the nodes as DistributedSampler
		 * does (every other index), the two halves interleaved at random. */
		int order[FILES], count[FILES] = {0}, next[NODES] = {0, 1};
		for (int f = 0; f < FILES; f++)
			order[f] = f;
		for (int f = FILES - 1; f > 0; f--) {
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			int j = (int)((seed >> 33) % (uint64_t)(f + 1)), x = order[f];
			order[f] = order[j];
			order[j] = x;
		}
		for (int k = 0; k < FILES; k++) {
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			int ni = (int)((seed >> 40) & 1);
			if (next[ni] >= FILES)
				ni = 1 - ni;
			int f = order[next[ni]];
			next[ni] += NODES;
			int s = serve(nodes, ni, f, t, claims == 2, refusals, stale);
			assert_int_equal(s / PER, f / PER); /* the label group asked for */
			count[s]++;
		}
		for (int f = 0; f < FILES; f++)
			wrong += count[f] != 1;
	}
	claim_table_free(t);
	for (int i = 0; i < NODES; i++) {
		dlshim_engine_destroy(nodes[i].e);
		free(nodes[i].mem);
	}
	return wrong;
}

static void test_two_nodes_share_epochs(void **state)
{
	(void)state;
	int refusals = 0, stale = 0, r1 = 0, s1 = 0, r0 = 0, s0 = 0;
	int wrong = run_epochs(2, &refusals, &stale);
	if (wrong)
		fail_msg("with claims, %d files were not served exactly once in their epoch", wrong);
	/* Without the answers' news each refusal teaches one file: more. */
	wrong = run_epochs(1, &r1, &s1);
	if (wrong)
		fail_msg("with claims (no news), %d files were not served exactly once in their epoch", wrong);
	/* Each node's view of the job lags (half its files go to the other
	 * node): the claims must have had to correct it. */
	assert_true(r1 + s1 > 0);
	assert_true(refusals < r1);
	int without = run_epochs(0, &r0, &s0);
	print_message("two nodes, %d epochs of %d files: with claims every file once per epoch (%d decisions refused, "
		      "%d re-opens of a past epoch, each decided again; %d and %d when answers do not tell what the "
		      "other node took); without claims, %d files served other than once\n",
		      EPOCHS, FILES, refusals, stale, r1, s1, without);
	/* The check above can fail: without claims the nodes overlap. */
	assert_true(without > 0);
}

/* An answer tells a node what the others took since it last asked, once. */
static void test_table_sync(void **state)
{
	(void)state;
	struct claim_table *t = claim_table_new();
	uint32_t at;
	uint64_t h[2];
	struct claim_sync cs = {h, 2, 0};
	assert_int_equal(claim_table_claim(t, 1, 9, 101, 10, 0, 0, &at, &cs), 1);
	assert_int_equal(cs.n, 0);
	assert_int_equal(claim_table_claim(t, 1, 9, 102, 10, 0, 1, &at, &cs), 1);
	assert_int_equal(cs.n, 1);
	assert_true(h[0] == 101);
	for (uint64_t f = 103; f < 106; f++)
		assert_int_equal(claim_table_claim(t, 1, 9, f, 10, 0, 1, &at, NULL), 1);
	/* Node 0 hears of 102..105 (not its own 101), two per answer. */
	assert_int_equal(claim_table_current(t, 1, 9, 0, 0, &at, &cs), 1);
	assert_int_equal(cs.n, 2);
	assert_true(h[0] == 102 && h[1] == 103);
	assert_int_equal(claim_table_claim(t, 1, 9, 106, 10, 0, 0, &at, &cs), 1);
	assert_int_equal(cs.n, 2);
	assert_true(h[0] == 104 && h[1] == 105);
	assert_int_equal(claim_table_current(t, 1, 9, 0, 0, &at, &cs), 1);
	assert_int_equal(cs.n, 0);
	/* A new epoch starts the news over. */
	for (uint64_t f = 107; f < 111; f++)
		assert_int_equal(claim_table_claim(t, 1, 9, f, 10, 0, 1, &at, NULL), 1);
	assert_int_equal(claim_table_claim(t, 1, 9, 101, 10, 1, 1, &at, NULL), 1);
	assert_int_equal(at, 1);
	assert_int_equal(claim_table_current(t, 1, 9, 1, 0, &at, &cs), 1);
	assert_int_equal(cs.n, 1);
	assert_true(h[0] == 101);
	/* A node index beyond the table's is refused as an error. */
	assert_int_equal(claim_table_claim(t, 1, 9, 200, 10, 1, CLAIM_MAX_NODES, &at, &cs), -1);
	claim_table_free(t);
}

/* A node far behind (it restarted, or joined late) catches up: the group
 * starts the epoch it is told, and the file counts as consumed there
 * (or, without `consumed`, only the epoch changes). */
static void test_catch_up(void **state)
{
	(void)state;
	struct node n;
	node_init(&n, 0);
	uint32_t it = n.item[3];
	assert_int_equal(dlshim_engine_group_catch_up(n.e, n.job, it, 5, 1), 5);
	assert_int_equal(dlshim_engine_item_refcnt(n.e, it), 0); /* consumed in epoch 5 */
	assert_true(dlshim_engine_item_refcnt(n.e, n.item[4]) > 0); /* the others are still needed */
	/* An older epoch changes nothing. */
	assert_int_equal(dlshim_engine_group_catch_up(n.e, n.job, n.item[4], 2, 1), 5);
	assert_true(dlshim_engine_item_refcnt(n.e, n.item[4]) > 0);
	/* Only the epoch: file 5 stays needed. */
	assert_int_equal(dlshim_engine_group_catch_up(n.e, n.job, n.item[5], 5, 0), 5);
	assert_true(dlshim_engine_item_refcnt(n.e, n.item[5]) > 0);
	/* The requests of epoch 5 never get file 3 again. */
	struct dlshim_open_result res;
	for (int f = 0; f < PER - 1; f++) {
		struct dlshim_file_id id = fid(f == 3 ? PER - 1 : f);
		dlshim_engine_open(n.e, n.job, &id, 0, &res);
		assert_int_not_equal(res.item, it);
		assert_int_equal(res.gepoch, 5);
		finish_loads(&n, n.job, &res, UINT32_MAX, NULL);
		if (res.kind == DLSHIM_OPEN_HIT)
			dlshim_engine_release(n.e, n.job, res.slot, res.gen, 0, 0);
	}
	/* A file outside the job's dataset is refused. */
	struct dlshim_file_id out = {9, 9, 10, 1, 0};
	int warm = dlshim_engine_job_find(n.e, "warm");
	dlshim_engine_open(n.e, warm, &out, 0, &res);
	assert_int_equal(dlshim_engine_group_catch_up(n.e, n.job, res.item, 1, 1), UINT32_MAX);
	if (res.kind == DLSHIM_OPEN_LOAD)
		dlshim_engine_load_done(n.e, warm, res.item, 0);
	dlshim_engine_destroy(n.e);
	free(n.mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_rules),
		cmocka_unit_test(test_table_grows),
		cmocka_unit_test(test_table_sync),
		cmocka_unit_test(test_two_nodes_share_epochs),
		cmocka_unit_test(test_catch_up),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
