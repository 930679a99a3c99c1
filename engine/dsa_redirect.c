/* Shared sampling behind redirection (DLSHIM_SAMPLER=dsa): each label group
 * has one dependent sampler (dsa.c) over the datasets its jobs have in it,
 * so labels stay right; a request is answered with the job's next draw.
 * Jobs drawing in the same round get the same item, so the second reads it
 * from the cache; a job that is not asking joins the rounds of a faster one
 * while its queue is shorter than the window, and nobody waits for anybody.
 * The engine's own bookkeeping (consumed bitmaps, group epochs) stays the
 * judge: a draw the engine would not accept is skipped. */
#include <stdlib.h>

#include "dlshim/dsa.h"
#include "internal.h"

void dlshim_engine_job_set_sampler(struct dlshim_engine *e, int j, enum dlshim_sampler s)
{
	if (j >= 0 && j < e->njobs && e->jobs[j].live && (s == DLSHIM_SAMPLER_CHUNK || s == DLSHIM_SAMPLER_DSA))
		e->jobs[j].sampler = s;
}

enum dlshim_sampler dlshim_engine_job_sampler(struct dlshim_engine *e, int j)
{
	return j >= 0 && j < e->njobs ? e->jobs[j].sampler : DLSHIM_SAMPLER_CHUNK;
}

/* Queued draws count for RefCnt: re-key an item after its queue count changed. */
static void recount(struct dlshim_engine *e, uint32_t it)
{
	struct item *x = &e->items[it];
	uint32_t p = 0;
	for (int k = 0; k < 2; k++) {
		if (x->group[k] == NONE || e->groups[x->group[k]]->dsa == NULL)
			continue;
		struct dlshim_dsa *d = e->groups[x->group[k]]->dsa;
		p += dlshim_dsa_pending(d, dlshim_dsa_find(d, x->dev, x->ino));
	}
	x->dsa_pending = p;
	evict_recount(&e->ev, it, eng_evict_key(x));
}

/* The sampler index of a member, recording the way back. */
static uint32_t local_of(struct group *g, const struct item *x, uint32_t it)
{
	uint32_t l = dlshim_dsa_item(g->dsa, x->dev, x->ino);
	if (l == DLSHIM_DSA_NONE)
		return l;
	if (l == g->ndsa_back) {
		if (g->ndsa_back == g->dsa_back_cap) {
			uint32_t c = g->dsa_back_cap ? g->dsa_back_cap * 2 : 64;
			uint32_t *b = realloc(g->dsa_back, c * sizeof(uint32_t));
			if (b == NULL)
				return DLSHIM_DSA_NONE; /* the index stays unmapped: never drawn (not in a dataset) */
			g->dsa_back = b;
			g->dsa_back_cap = c;
		}
		g->dsa_back[g->ndsa_back++] = it;
	}
	return l < g->ndsa_back ? l : DLSHIM_DSA_NONE;
}

/* Make the job's dataset in the sampler match the group members it needs
 * (first use, or files added by a rescan). Returns the slot or -1. */
static int sync_job(struct dlshim_engine *e, struct job *jb, struct group *g)
{
	struct jgroup *jg = &jb->jg[g->id];
	if (g->dsa == NULL && (g->dsa = dlshim_dsa_create(e->ev.rng ^ ((uint64_t)g->id << 32))) == NULL)
		return -1;
	int slot = (int)jg->dsa_slot1 - 1;
	if (slot >= 0 && dlshim_dsa_job_size(g->dsa, slot) == jg->size)
		return slot;
	uint32_t *ids = malloc((g->n ? g->n : 1) * sizeof(uint32_t)), n = 0;
	if (ids == NULL)
		return -1;
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < g->n; i++) {
		uint32_t it = g->items[i];
		/* what a member takes in the cache: whole blocks */
		bytes += (e->items[it].size + DLSHIM_BLOCK_SIZE - 1) / DLSHIM_BLOCK_SIZE * DLSHIM_BLOCK_SIZE;
		if (!bit_get(jb->needed, it) || e->items[it].hidden)
			continue;
		uint32_t l = local_of(g, &e->items[it], it);
		if (l != DLSHIM_DSA_NONE)
			ids[n++] = l;
	}
	g->dsa_mean = g->n ? bytes / g->n : 0;
	if (slot < 0) {
		slot = dlshim_dsa_job_add(g->dsa, ids, n);
		jg->dsa_slot1 = (uint32_t)(slot + 1);
	} else if (dlshim_dsa_job_extend(g->dsa, slot, ids, n) < 0) {
		slot = -1;
	}
	free(ids);
	return slot;
}

/* How long a job's queue in a group may grow while other jobs draw: the
 * lag a slower job may build up, every queued item still cached when it is
 * read. The queues of all dsa jobs in all groups share half the cache
 * (measured in tests/integration/test_dsa.py: a quarter shared less, the
 * whole cache thrashed). */
static uint32_t window(struct dlshim_engine *e, const struct group *g)
{
	uint32_t live = 0;
	for (int j = 0; j < e->njobs; j++)
		live += e->jobs[j].live && e->jobs[j].sampler == DLSHIM_SAMPLER_DSA;
	uint64_t per = g->dsa_mean ? g->dsa_mean : DLSHIM_BLOCK_SIZE;
	uint64_t w = e->nblocks * DLSHIM_BLOCK_SIZE / (2ULL * (e->ngroups ? e->ngroups : 1) * (live ? live : 1) * per);
	return w < 1 ? 1 : w > 256 ? 256 : (uint32_t)w;
}

/* One round for the job and every job not too far behind; items drawn are
 * re-keyed for eviction. */
static void round_for(struct dlshim_engine *e, struct group *g, int slot)
{
	uint32_t win = window(e, g), out[DLSHIM_DSA_MAX_JOBS];
	struct dlshim_dsa_mask who = {{0, 0}};
	for (int i = 0; i < DLSHIM_DSA_MAX_JOBS; i++)
		if (dlshim_dsa_job_live(g->dsa, i) && (i == slot || dlshim_dsa_queued(g->dsa, i) < win))
			who.w[i / 64] |= 1ULL << (i % 64);
	dlshim_dsa_round(g->dsa, who, out);
	for (int i = 0; i < DLSHIM_DSA_MAX_JOBS; i++)
		if ((who.w[i / 64] >> (i % 64) & 1) && out[i] < g->ndsa_back)
			recount(e, g->dsa_back[out[i]]);
}

void dsa_hold(struct job *jb, struct group *g, uint32_t it)
{
	jb->jg[g->id].dsa_hold1 = it + 1;
}

uint32_t dsa_choose(struct dlshim_engine *e, struct job *jb, struct group *g, uint32_t req)
{
	struct jgroup *jg = &jb->jg[g->id];
	struct item *rq = &e->items[req];
	if (jg->dsa_hold1) {
		uint32_t it = jg->dsa_hold1 - 1;
		jg->dsa_hold1 = 0;
		if (eng_candidate(jb, rq, &e->items[it], it))
			return it;
	}
	int slot = sync_job(e, jb, g);
	if (slot < 0)
		return NONE;
	/* A draw the engine rejects (read already this epoch through another
	 * path, e.g. at an epoch boundary after files were added) is skipped;
	 * a whole epoch of rejects means the two disagree: let the caller decide. */
	for (uint32_t tries = 0; tries <= jg->size; tries++) {
		if (dlshim_dsa_queued(g->dsa, slot) == 0)
			round_for(e, g, slot);
		uint32_t l = dlshim_dsa_next(g->dsa, slot, 1);
		if (l == DLSHIM_DSA_NONE || l >= g->ndsa_back)
			return NONE;
		uint32_t it = g->dsa_back[l];
		recount(e, it);
		if (eng_candidate(jb, rq, &e->items[it], it))
			return it;
	}
	return NONE;
}

/* Start loading the job's next queued draws that are not in memory, with
 * the same budget as a chunk (a quarter of the cache); rounds are run to
 * fill the queue first. A hit sends them as loads ahead (after the reply);
 * a miss loads them in the same batch as the served file. */
void dsa_load_ahead(struct dlshim_engine *e, struct job *jb, struct group *g, struct dlshim_open_result *res)
{
	int slot = (int)jb->jg[g->id].dsa_slot1 - 1;
	if (slot < 0 || g->dsa == NULL)
		return;
	/* loading ahead deeper than a quarter of the lag only evicted more */
	uint32_t depth = window(e, g) / 4 + 1;
	if (g->k && depth > g->k)
		depth = g->k;
	if (depth > DLSHIM_MAX_CHUNK)
		depth = DLSHIM_MAX_CHUNK;
	for (uint32_t guard = 0; dlshim_dsa_queued(g->dsa, slot) < depth && guard < depth; guard++)
		round_for(e, g, slot);
	int hit = res->kind == DLSHIM_OPEN_HIT;
	if (hit)
		res->nload = 0;
	uint64_t bytes = 0, budget = e->nblocks * DLSHIM_BLOCK_SIZE / 4;
	for (uint32_t i = 0; i < res->nload; i++)
		bytes += e->items[res->load_item[i]].size;
	uint32_t started = 0;
	for (uint32_t k = 0; k < depth && res->nload < DLSHIM_MAX_CHUNK; k++) {
		uint32_t l = dlshim_dsa_peek(g->dsa, slot, k);
		if (l == DLSHIM_DSA_NONE || l >= g->ndsa_back)
			break;
		uint32_t it = g->dsa_back[l];
		struct item *x = &e->items[it];
		if (x->state != ITEM_ABSENT || x->path == NULL || x->refcnt == 0)
			continue;
		if (bytes + x->size > budget || eng_start_load(e, jb, it, 0) < 0)
			break;
		bytes += x->size;
		res->load_item[res->nload] = it;
		res->load_slot[res->nload] = x->slot;
		res->nload++;
		started++;
	}
	if (hit && started) {
		res->ahead = 1;
		jb->st.loads_ahead++;
	}
}

void dsa_job_end(struct dlshim_engine *e, struct job *jb)
{
	for (uint32_t g = 0; g < jb->njg && g < e->ngroups; g++) {
		struct jgroup *jg = &jb->jg[g];
		struct group *gr = e->groups[g];
		if (!jg->dsa_slot1 || gr->dsa == NULL)
			continue;
		int slot = (int)jg->dsa_slot1 - 1;
		/* its queued draws no longer hold their items in the cache */
		uint32_t n = dlshim_dsa_queued(gr->dsa, slot), *q = malloc((n ? n : 1) * sizeof(uint32_t));
		for (uint32_t k = 0; q && k < n; k++)
			q[k] = dlshim_dsa_peek(gr->dsa, slot, k);
		dlshim_dsa_job_remove(gr->dsa, slot);
		for (uint32_t k = 0; q && k < n; k++)
			if (q[k] < gr->ndsa_back)
				recount(e, gr->dsa_back[q[k]]);
		free(q);
		jg->dsa_slot1 = jg->dsa_hold1 = 0;
	}
}

void dsa_group_free(struct group *g)
{
	dlshim_dsa_destroy(g->dsa);
	free(g->dsa_back);
	g->dsa = NULL;
	g->dsa_back = NULL;
}
