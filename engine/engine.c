/* The engine: catalog of files, jobs with per-epoch consumption, slot and
 * block allocation in the shared segment, and eviction. See engine.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

#include "dlshim/engine.h"
#include "dlshim/shm.h"

#include "internal.h"

static uint64_t random_id(uint64_t seed)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t z = seed ^ ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	return z ^ (z >> 31);
}

static int item_pinned(void *ctx, uint32_t it)
{
	struct dlshim_engine *e = ctx;
	struct item *x = &e->items[it];
	return x->slot == NONE || e->sp[x->slot].pins > 0;
}

struct dlshim_engine *dlshim_engine_create(const struct dlshim_engine_opts *o)
{
	uint64_t nslots, nblocks;
	/* Largest data area whose layout fits in the given length. */
	/* One block at a time: the per-block overhead is a fraction of a
	 * block, so this takes a few thousand cheap steps at most. */
	uint64_t nb = o->shm_len / DLSHIM_BLOCK_SIZE;
	size_t need = dlshim_shm_layout(nb * DLSHIM_BLOCK_SIZE, &nslots, &nblocks);
	while (need > o->shm_len && nb > 1) {
		nb--;
		need = dlshim_shm_layout(nb * DLSHIM_BLOCK_SIZE, &nslots, &nblocks);
	}
	if (need > o->shm_len || o->shm_base == NULL)
		return NULL;

	struct dlshim_engine *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return NULL;
	memset(o->shm_base, 0, sizeof(struct dlshim_shm_header));
	struct dlshim_shm_header *h = o->shm_base;
	h->magic = DLSHIM_SHM_MAGIC;
	h->version = DLSHIM_SHM_VERSION;
	h->header_size = sizeof(*h);
	h->slot_size = sizeof(struct dlshim_shm_slot);
	h->block_size = DLSHIM_BLOCK_SIZE;
	h->nslots = nslots;
	h->nblocks = nblocks;
	struct dlshim_shm_geometry geo;
	dlshim_shm_geometry(nblocks * DLSHIM_BLOCK_SIZE, &geo);
	h->slots_off = geo.slots_off;
	h->next_off = geo.next_off;
	h->index_off = geo.index_off;
	h->nindex = geo.nindex;
	h->data_off = geo.data_off;
	h->total_size = o->shm_len;
	e->shidx = (struct dlshim_shm_index *)((uint8_t *)o->shm_base + h->index_off);
	memset(e->shidx, 0, geo.nindex * sizeof(struct dlshim_shm_index));
	h->segment_id = random_id(o->seed);
	e->hdr = h;
	e->slots = (struct dlshim_shm_slot *)((uint8_t *)o->shm_base + h->slots_off);
	e->next = (uint32_t *)((uint8_t *)o->shm_base + h->next_off);
	e->nslots = nslots;
	e->nblocks = nblocks;
	e->sp = calloc(nslots, sizeof(*e->sp));
	e->free_slots = malloc(nslots * sizeof(uint32_t));
	e->free_blocks = malloc(nblocks * sizeof(uint32_t));
	if (!e->sp || !e->free_slots || !e->free_blocks || evict_init(&e->ev, o->evict, o->seed)) {
		dlshim_engine_destroy(e);
		return NULL;
	}
	for (uint64_t i = 0; i < nslots; i++) {
		/* Free slots carry an odd generation: never valid for a reader. */
		atomic_store_explicit(&e->slots[i].gen, 1, memory_order_relaxed);
		e->slots[i].first_block = NONE;
		e->sp[i].item = NONE;
		e->free_slots[nslots - 1 - i] = (uint32_t)i;
	}
	e->nfree_slots = (uint32_t)nslots;
	for (uint64_t i = 0; i < nblocks; i++) {
		e->next[i] = NONE;
		e->free_blocks[nblocks - 1 - i] = (uint32_t)i;
	}
	e->nfree_blocks = (uint32_t)nblocks;
	e->max_item_bytes = o->max_item_bytes ? o->max_item_bytes : UINT64_MAX;
	e->ev.skip = item_pinned;
	e->ev.skip_ctx = e;
	e->cs.capacity_bytes = nblocks * DLSHIM_BLOCK_SIZE;
	return e;
}

void dlshim_engine_destroy(struct dlshim_engine *e)
{
	if (e == NULL)
		return;
	struct key_node *k, *tmp;
	HASH_ITER(hh, e->index, k, tmp) {
		HASH_DEL(e->index, k);
		free(k);
	}
	for (int j = 0; j < e->njobs; j++) {
		redirect_job_end(e, &e->jobs[j]);
		free(e->jobs[j].needed);
		free(e->jobs[j].consumed);
		order_free(&e->jobs[j].order);
	}
	for (uint32_t i = 0; i < e->nitems; i++)
		free(e->items[i].path);
	for (uint32_t g = 0; g < e->ngroups; g++) {
		struct group *gr = e->groups[g];
		HASH_DEL(e->group_index, gr);
		free(gr->key);
		free(gr->items);
		free(gr->res);
		dsa_group_free(gr);
		free(gr);
	}
	free(e->groups);
	evict_free(&e->ev);
	free(e->items);
	free(e->sp);
	free(e->free_slots);
	free(e->free_blocks);
	free(e);
}

uint64_t dlshim_engine_segment_id(struct dlshim_engine *e) { return e->hdr->segment_id; }
void dlshim_engine_rows_epoch_bump(struct dlshim_engine *e) { atomic_fetch_add(&e->hdr->rows_epochs, 1); }

/* ---- catalog ---------------------------------------------------------- */

static int reserve_items(struct dlshim_engine *e, uint32_t want)
{
	if (want <= e->items_cap)
		return 0;
	uint32_t cap = e->items_cap ? e->items_cap : 1024;
	while (cap < want)
		cap *= 2;
	struct item *n = realloc(e->items, (size_t)cap * sizeof(*n));
	if (n == NULL)
		return -1;
	e->items = n;
	size_t oldw = (e->items_cap + 63) / 64, neww = (cap + 63) / 64;
	for (int j = 0; j < e->njobs; j++) {
		struct job *jb = &e->jobs[j];
		if (!jb->live)
			continue;
		uint64_t *a = realloc(jb->needed, neww * 8), *b;
		if (a == NULL)
			return -1;
		jb->needed = a;
		b = realloc(jb->consumed, neww * 8);
		if (b == NULL)
			return -1;
		jb->consumed = b;
		memset(a + oldw, 0, (neww - oldw) * 8);
		memset(b + oldw, 0, (neww - oldw) * 8);
	}
	if (evict_reserve(&e->ev, cap))
		return -1;
	e->items_cap = cap;
	return 0;
}

static uint32_t item_lookup(struct dlshim_engine *e, uint64_t dev, uint64_t ino)
{
	struct key_node probe, *k;
	memset(&probe, 0, sizeof(probe));
	probe.key.dev = dev;
	probe.key.ino = ino;
	HASH_FIND(hh, e->index, &probe.key, sizeof(probe.key), k);
	return k ? k->item : NONE;
}

uint32_t dlshim_engine_find_item(struct dlshim_engine *e, uint64_t dev, uint64_t ino)
{
	return item_lookup(e, dev, ino);
}

uint32_t eng_item_get(struct dlshim_engine *e, const struct dlshim_file_id *id)
{
	uint32_t it = item_lookup(e, id->dev, id->ino);
	if (it != NONE)
		return it;
	if (reserve_items(e, e->nitems + 1))
		return NONE;
	struct key_node *k = calloc(1, sizeof(*k));
	if (k == NULL)
		return NONE;
	it = e->nitems++;
	struct item *x = &e->items[it];
	memset(x, 0, sizeof(*x));
	x->dev = id->dev;
	x->ino = id->ino;
	x->size = id->size;
	x->mtime_ns = id->mtime_ns;
	x->ctime_ns = id->ctime_ns;
	x->slot = NONE;
	x->group[0] = x->group[1] = NONE;
	x->gres_pos[0] = x->gres_pos[1] = NONE;
	k->key.dev = id->dev;
	k->key.ino = id->ino;
	k->item = it;
	HASH_ADD(hh, e->index, key, sizeof(k->key), k);
	return it;
}

/* ---- reference counts (RefCnt) ------------------------------------------ */

static void refcnt_add(struct dlshim_engine *e, uint32_t it, int delta)
{
	struct item *x = &e->items[it];
	if (delta < 0 && x->refcnt == 0)
		return;
	x->refcnt += delta;
	evict_recount(&e->ev, it, eng_evict_key(x));
}

/* Epochs the job has completed: as many as its least advanced group. */
static uint64_t job_epochs_done(struct dlshim_engine *e, struct job *jb)
{
	uint64_t min = UINT64_MAX;
	for (uint32_t g = 0; g < jb->njg && g < e->ngroups; g++)
		if (jb->jg[g].size) {
			uint64_t done = jb->jg[g].epoch + (jb->jg[g].cons >= jb->jg[g].size);
			if (done < min)
				min = done;
		}
	return min == UINT64_MAX ? 0 : min;
}

void eng_job_need(struct dlshim_engine *e, struct job *jb, uint32_t it)
{
	if (bit_get(jb->needed, it))
		return;
	bit_set(jb->needed, it);
	jb->dataset_size++;
	uint32_t g = e->items[it].group[GKIND(jb)];
	if (g != NONE && g < jb->njg) {
		/* A file joining a group whose epoch is complete belongs to the
		 * next epoch: start it first. */
		if (jb->jg[g].size && jb->jg[g].cons >= jb->jg[g].size)
			eng_group_rollover(e, jb, g);
		else if (jb->jg[g].size == 0)
			jb->jg[g].epoch = job_epochs_done(e, jb); /* a group new to the job joins its current epoch */
		jb->jg[g].size++;
	}
	if (!bit_get(jb->consumed, it))
		refcnt_add(e, it, +1);
	else
		jb->consumed_count++;
}

/* The job read `it` this epoch. In exact mode, when every item of its
 * declared dataset has been read, its next epoch starts and it needs them
 * all again (redirect jobs roll over per group, in redirect.c). */
void eng_job_consume_elsewhere(struct dlshim_engine *e, struct job *jb, uint32_t it)
{
	uint32_t g = e->items[it].group[GKIND(jb)];
	if (bit_get(jb->consumed, it) || g == NONE || g >= jb->njg)
		return;
	bit_set(jb->consumed, it);
	jb->consumed_count++;
	refcnt_add(e, it, -1);
	if (++jb->jg[g].cons >= jb->jg[g].size)
		eng_group_rollover(e, jb, g);
}

void eng_job_consume(struct dlshim_engine *e, struct job *jb, uint32_t req, uint32_t it)
{
	if (bit_get(jb->consumed, it))
		return;
	order_note(&jb->order, req, it);
	bit_set(jb->consumed, it);
	jb->consumed_count++;
	jb->st.bytes_consumed += e->items[it].size;
	refcnt_add(e, it, -1);
	uint32_t g = e->items[it].group[GKIND(jb)];
	if (g != NONE && g < jb->njg) {
		/* Epochs are kept per group: a group whose every file the job
		 * has read starts its next epoch at once, so RefCnt sees that the
		 * job needs those files again. */
		if (++jb->jg[g].cons >= jb->jg[g].size)
			eng_group_rollover(e, jb, g);
		return;
	}
	/* Files outside any group (undeclared ones opened anyway) share one
	 * dataset-wide epoch, counted only for a job that declared files. */
	if (!jb->has_dataset || jb->declared == 0 || jb->consumed_count < jb->dataset_size)
		return;
	jb->st.epochs++;
	jb->consumed_count = 0;
	for (uint32_t i = 0; i < e->nitems; i++)
		if (bit_get(jb->needed, i)) {
			bit_clr(jb->consumed, i);
			refcnt_add(e, i, +1);
		}
}

/* ---- jobs ----------------------------------------------------------------- */

int dlshim_engine_job_find(struct dlshim_engine *e, const char *name)
{
	for (int j = 0; j < e->njobs; j++)
		if (strcmp(e->jobs[j].name, name) == 0)
			return j;
	return -1;
}

int dlshim_engine_job_attach(struct dlshim_engine *e, const char *name)
{
	int j = dlshim_engine_job_find(e, name);
	if (j < 0) {
		/* Reuse the table entry of an ended job before growing. */
		for (int k = 0; k < e->njobs && j < 0; k++)
			if (!e->jobs[k].live && e->jobs[k].sessions == 0 && e->njobs == DLSHIM_ENGINE_MAX_JOBS)
				j = k;
		if (j < 0) {
			if (e->njobs == DLSHIM_ENGINE_MAX_JOBS)
				return -1;
			j = e->njobs++;
		}
		memset(&e->jobs[j], 0, sizeof(e->jobs[j]));
		snprintf(e->jobs[j].name, sizeof(e->jobs[j].name), "%s", name);
	}
	struct job *jb = &e->jobs[j];
	if (!jb->live) {
		size_t words = (e->items_cap + 63) / 64;
		free(jb->needed);
		free(jb->consumed);
		jb->needed = calloc(words ? words : 1, 8);
		jb->consumed = calloc(words ? words : 1, 8);
		if (!jb->needed || !jb->consumed)
			return -1;
		jb->dataset_size = jb->consumed_count = jb->declared = 0;
		jb->has_dataset = 0;
		jb->mode = DLSHIM_REDIRECT_OFF;
		jb->sampler = DLSHIM_SAMPLER_CHUNK;
		jb->live = 1;
	}
	jb->sessions++;
	return j;
}

void dlshim_engine_job_release(struct dlshim_engine *e, int j)
{
	if (j >= 0 && j < e->njobs && e->jobs[j].sessions > 0)
		e->jobs[j].sessions--;
}

int dlshim_engine_job_sessions(struct dlshim_engine *e, int j)
{
	return (j >= 0 && j < e->njobs) ? (int)e->jobs[j].sessions : 0;
}

void dlshim_engine_job_detach(struct dlshim_engine *e, int j)
{
	if (j < 0 || j >= e->njobs || e->jobs[j].sessions == 0)
		return;
	dlshim_engine_job_release(e, j);
	dlshim_engine_job_end(e, j);
}

void dlshim_engine_job_end(struct dlshim_engine *e, int j)
{
	if (j < 0 || j >= e->njobs || e->jobs[j].sessions > 0 || !e->jobs[j].live)
		return;
	struct job *jb = &e->jobs[j];
	/* The job ended: it no longer needs anything. */
	for (uint32_t i = 0; i < e->nitems; i++)
		if (bit_get(jb->needed, i) && !bit_get(jb->consumed, i))
			refcnt_add(e, i, -1);
	if (jb->jg) { /* the groups go: keep the count (row mappings' epochs may be more) */
		uint64_t g = job_epochs_done(e, jb);
		jb->st.epochs = g > jb->st.epochs ? g : jb->st.epochs;
	}
	redirect_job_end(e, jb);
	order_free(&jb->order);
	free(jb->needed);
	free(jb->consumed);
	jb->needed = jb->consumed = NULL;
	jb->live = 0;
}

uint32_t dlshim_engine_job_add_item(struct dlshim_engine *e, int j, const struct dlshim_file_id *id)
{
	uint32_t it = eng_item_get(e, id);
	if (it != NONE && j >= 0 && j < e->njobs && e->jobs[j].live) {
		e->jobs[j].declared++;
		eng_job_need(e, &e->jobs[j], it);
	}
	return it;
}

const char *dlshim_engine_job_name(struct dlshim_engine *e, int j)
{
	return (j >= 0 && j < e->njobs) ? e->jobs[j].name : NULL;
}
int dlshim_engine_job_live(struct dlshim_engine *e, int j) { return j >= 0 && j < e->njobs && e->jobs[j].live; }
int dlshim_engine_njobs(struct dlshim_engine *e) { return e->njobs; }

/* ---- the shared index (dev, ino) -> slot, for clients' hit path ---------- */

/* Linear probing; deletion shifts later entries back so no tombstones pile
 * up. A client racing an update may miss an entry (then it asks the
 * coordinator) but never trusts a wrong one (it checks the slot). */
static void index_put(struct dlshim_engine *e, uint64_t dev, uint64_t ino, uint32_t slot)
{
	uint64_t mask = e->hdr->nindex - 1, i = dlshim_shm_hash(dev, ino) & mask;
	for (;; i = (i + 1) & mask) {
		struct dlshim_shm_index *x = &e->shidx[i];
		if (!atomic_load_explicit(&x->used, memory_order_relaxed) ||
		    (atomic_load_explicit(&x->dev, memory_order_relaxed) == dev &&
		     atomic_load_explicit(&x->ino, memory_order_relaxed) == ino)) {
			atomic_store_explicit(&x->slot, slot, memory_order_relaxed);
			atomic_store_explicit(&x->dev, dev, memory_order_relaxed);
			atomic_store_explicit(&x->ino, ino, memory_order_relaxed);
			atomic_store_explicit(&x->used, 1, memory_order_release);
			return;
		}
	}
}

static void index_del(struct dlshim_engine *e, uint64_t dev, uint64_t ino)
{
	uint64_t mask = e->hdr->nindex - 1, i = dlshim_shm_hash(dev, ino) & mask;
	for (;; i = (i + 1) & mask) {
		struct dlshim_shm_index *x = &e->shidx[i];
		if (!atomic_load_explicit(&x->used, memory_order_relaxed))
			return;
		if (atomic_load_explicit(&x->dev, memory_order_relaxed) == dev &&
		    atomic_load_explicit(&x->ino, memory_order_relaxed) == ino)
			break;
	}
	/* Backward-shift: move later entries of the cluster into the hole when
	 * their home position allows it. */
	uint64_t hole = i;
	for (uint64_t j = (i + 1) & mask;; j = (j + 1) & mask) {
		struct dlshim_shm_index *y = &e->shidx[j];
		if (!atomic_load_explicit(&y->used, memory_order_relaxed))
			break;
		uint64_t home = dlshim_shm_hash(atomic_load_explicit(&y->dev, memory_order_relaxed),
						atomic_load_explicit(&y->ino, memory_order_relaxed)) & mask;
		/* y may fill the hole if its home is not cyclically in (hole, j]. */
		int in_between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
		if (in_between)
			continue;
		struct dlshim_shm_index *h = &e->shidx[hole];
		atomic_store_explicit(&h->slot, atomic_load_explicit(&y->slot, memory_order_relaxed), memory_order_relaxed);
		atomic_store_explicit(&h->dev, atomic_load_explicit(&y->dev, memory_order_relaxed), memory_order_relaxed);
		atomic_store_explicit(&h->ino, atomic_load_explicit(&y->ino, memory_order_relaxed), memory_order_relaxed);
		atomic_store_explicit(&h->used, 1, memory_order_release);
		hole = j;
	}
	atomic_store_explicit(&e->shidx[hole].used, 0, memory_order_release);
}

/* ---- slots and blocks --------------------------------------------------- */

static void slot_free(struct dlshim_engine *e, uint32_t s)
{
	struct dlshim_shm_slot *sl = &e->slots[s];
	if (e->sp[s].indexed) {
		index_del(e, sl->dev, sl->ino);
		e->sp[s].indexed = 0;
	}
	/* Odd generation first: readers holding the old one now fail validation. */
	uint64_t g = atomic_load_explicit(&sl->gen, memory_order_relaxed);
	if (!(g & 1))
		atomic_store_explicit(&sl->gen, g + 1, memory_order_release);
	uint32_t b = sl->first_block;
	for (uint32_t n = 0; n < sl->nblocks && b != NONE; n++) {
		uint32_t nx = e->next[b];
		e->next[b] = NONE;
		e->free_blocks[e->nfree_blocks++] = b;
		b = nx;
	}
	e->cs.used_bytes -= (uint64_t)sl->nblocks * DLSHIM_BLOCK_SIZE;
	sl->first_block = NONE;
	sl->nblocks = 0;
	sl->size = 0;
	e->sp[s].item = NONE;
	e->sp[s].used = 0;
	e->sp[s].pins = 0;
	e->free_slots[e->nfree_slots++] = s;
}

static void item_evict(struct dlshim_engine *e, uint32_t it)
{
	struct item *x = &e->items[it];
	evict_del(&e->ev, it);
	if (x->slot != NONE)
		slot_free(e, x->slot);
	x->slot = NONE;
	x->state = ITEM_ABSENT;
	eng_group_res_del(e, it);
	if (eng_evict_key(x) > 0) /* read from disk for nothing: some live job still needed it */
		e->cs.waste_bytes += x->size;
	e->cs.evictions++;
	e->cs.items_resident--;
}

/* Detach a resident item from its slot; a pinned slot lives on as an
 * orphan until its last pin goes. */
static void item_drop_slot(struct dlshim_engine *e, uint32_t it)
{
	struct item *x = &e->items[it];
	uint32_t s = x->slot;
	evict_del(&e->ev, it);
	x->slot = NONE;
	x->state = ITEM_ABSENT;
	eng_group_res_del(e, it);
	e->cs.items_resident--;
	if (e->sp[s].indexed) { /* the file changed: no client may find the old bytes */
		index_del(e, e->slots[s].dev, e->slots[s].ino);
		e->sp[s].indexed = 0;
	}
	if (e->sp[s].pins == 0)
		slot_free(e, s);
	else
		e->sp[s].item = NONE;
}

/* Room for `size` bytes, evicting as the policy says; with `spare`, only
 * items no job needs any more (a load ahead of demand must not push out
 * what is yet to be read). */
static int slot_alloc(struct dlshim_engine *e, struct job *jb, uint64_t size, int spare, uint32_t *out)
{
	uint64_t nb = (size + DLSHIM_BLOCK_SIZE - 1) / DLSHIM_BLOCK_SIZE;
	if (nb > e->nblocks)
		return -1;
	while (e->nfree_blocks < nb || e->nfree_slots == 0) {
		uint32_t v = evict_victim(&e->ev);
		if (v == NONE || (spare && eng_evict_key(&e->items[v]) > 0))
			return -1;
		item_evict(e, v);
		if (jb)
			jb->st.evictions++;
	}
	uint32_t s = e->free_slots[--e->nfree_slots];
	struct dlshim_shm_slot *sl = &e->slots[s];
	uint32_t prev = NONE;
	for (uint64_t i = 0; i < nb; i++) {
		uint32_t b = e->free_blocks[--e->nfree_blocks];
		if (prev == NONE)
			sl->first_block = b;
		else
			e->next[prev] = b;
		e->next[b] = NONE;
		prev = b;
	}
	if (nb == 0)
		sl->first_block = NONE;
	sl->nblocks = (uint32_t)nb;
	sl->size = size;
	e->cs.used_bytes += nb * DLSHIM_BLOCK_SIZE;
	e->sp[s].used = 1;
	e->sp[s].pins = 0;
	/* Until published, no generation a client could hold matches. */
	e->sp[s].gen = atomic_load_explicit(&sl->gen, memory_order_relaxed);
	*out = s;
	return 0;
}

/* Serve resident item `it`: pin its slot for the caller and count a hit. */
void eng_hit(struct dlshim_engine *e, struct job *jb, uint32_t it, struct dlshim_open_result *res)
{
	struct item *x = &e->items[it];
	eng_pin(e, x->slot);
	evict_touch(&e->ev, it);
	res->kind = DLSHIM_OPEN_HIT;
	res->slot = x->slot;
	res->gen = e->sp[x->slot].gen;
	jb->st.hits++;
}

void eng_pin(struct dlshim_engine *e, uint32_t s)
{
	if (e->sp[s].pins++ == 0) {
		e->pinned_slots++;
		/* FIFO keeps pinned items in place (order is load order) and
		 * skips them when choosing; the others take them out. */
		if (e->sp[s].item != NONE && e->ev.policy != DLSHIM_EVICT_FIFO)
			evict_del(&e->ev, e->sp[s].item);
	}
}

/* ---- file versions -------------------------------------------------------- */

static int item_same(const struct item *x, const struct dlshim_file_id *id)
{
	return x->size == id->size && x->mtime_ns == id->mtime_ns && x->ctime_ns == id->ctime_ns;
}

int dlshim_engine_item_id(struct dlshim_engine *e, uint32_t it, struct dlshim_file_id *out)
{
	if (it >= e->nitems)
		return -1;
	const struct item *x = &e->items[it];
	*out = (struct dlshim_file_id){x->dev, x->ino, x->size, x->mtime_ns, x->ctime_ns};
	return 0;
}

void dlshim_engine_item_changed(struct dlshim_engine *e, uint32_t it, const struct dlshim_file_id *now)
{
	if (it >= e->nitems)
		return;
	struct item *x = &e->items[it];
	if (x->state == ITEM_RESIDENT)
		item_drop_slot(e, it);
	/* A loading item keeps its version until load_done: the loader's own
	 * before/after check rejects what it read meanwhile. */
	if (x->state == ITEM_ABSENT) {
		x->size = now->size;
		x->mtime_ns = now->mtime_ns;
		x->ctime_ns = now->ctime_ns;
	}
}

/* ---- requests ------------------------------------------------------------ */

void dlshim_engine_open(struct dlshim_engine *e, int j, const struct dlshim_file_id *id, unsigned flags,
			struct dlshim_open_result *res)
{
	memset(res, 0, sizeof(*res));
	res->kind = DLSHIM_OPEN_PASS;
	res->item = res->requested = res->slot = NONE;
	if (j < 0 || j >= e->njobs || !e->jobs[j].live)
		return;
	struct job *jb = &e->jobs[j];
	int retry = flags & DLSHIM_OPEN_F_RETRY, ahead = (flags & DLSHIM_OPEN_F_AHEAD) != 0;
	int held = (flags & DLSHIM_OPEN_F_HELD) != 0;
	if (!retry && !ahead)
		jb->st.requests++;
	uint32_t it = eng_item_get(e, id);
	if (it == NONE) {
		jb->st.passthrough++;
		return;
	}
	struct item *x = &e->items[it];
	res->item = it;
	res->requested = it;
	res->size = id->size;
	if (x->state != ITEM_LOADING && !item_same(x, id)) {
		/* The file changed since it was cached or scanned: never serve
		 * the old bytes, and load the version the client sees. */
		if (x->state == ITEM_RESIDENT)
			e->cs.stale_reloads++;
		dlshim_engine_item_changed(e, it, id);
	}
	if (jb->mode != DLSHIM_REDIRECT_OFF && x->group[GKIND(jb)] != NONE && !ahead) {
		redirect_open(e, j, it, flags, res);
		return;
	}
	if (!retry && !held) {
		eng_job_need(e, jb, it);
		if (!ahead)
			eng_job_consume(e, jb, it, it);
	}
	if (ahead && x->state != ITEM_ABSENT)
		return; /* resident or on its way: nothing to load */
	if (x->state == ITEM_LOADING) {
		if (flags & DLSHIM_OPEN_F_NOWAIT) {
			jb->st.passthrough++; /* the client reads its own file */
			return;
		}
		res->kind = DLSHIM_OPEN_WAIT;
		jb->st.waits++;
		return;
	}
	if (x->state == ITEM_RESIDENT) {
		eng_hit(e, jb, it, res);
		return;
	}
	if (eng_start_load(e, jb, it, (flags & DLSHIM_OPEN_F_SPARE) != 0) < 0) {
		jb->st.passthrough += !ahead;
		return;
	}
	if (ahead)
		jb->st.loads_ahead++;
	else
		jb->st.misses++;
	res->kind = DLSHIM_OPEN_LOAD;
	res->slot = x->slot;
}

/* Allocate a slot for `it`, mark it loading and pin it for the loader.
 * -1 when it is too big or nothing can be evicted. */
int eng_start_load(struct dlshim_engine *e, struct job *jb, uint32_t it, int spare)
{
	struct item *x = &e->items[it];
	uint32_t s;
	if (x->size > e->max_item_bytes)
		return -1;
	if (slot_alloc(e, jb, x->size, spare, &s)) {
		if (spare)
			e->cs.spare_refused++;
		else
			e->cs.alloc_failures++;
		return -1;
	}
	struct dlshim_shm_slot *sl = &e->slots[s];
	sl->dev = x->dev;
	sl->ino = x->ino;
	sl->mtime_ns = x->mtime_ns;
	sl->ctime_ns = x->ctime_ns;
	e->sp[s].item = it;
	x->slot = s;
	x->state = ITEM_LOADING;
	e->cs.items_resident++;
	eng_group_res_add(e, it);
	eng_pin(e, s);
	return 0;
}

int dlshim_engine_slot_iov(struct dlshim_engine *e, uint32_t s, uint64_t off, struct iovec *iov, int max)
{
	if (s >= e->nslots)
		return 0;
	struct dlshim_shm_slot *sl = &e->slots[s];
	uint8_t *data = (uint8_t *)e->hdr + e->hdr->data_off;
	uint32_t b = sl->first_block;
	uint64_t pos = 0;
	int n = 0;
	while (b != NONE && pos < sl->size && n < max) {
		uint64_t len = sl->size - pos < DLSHIM_BLOCK_SIZE ? sl->size - pos : DLSHIM_BLOCK_SIZE;
		if (pos + len > off) {
			uint64_t skip = off > pos ? off - pos : 0;
			iov[n].iov_base = data + (uint64_t)b * DLSHIM_BLOCK_SIZE + skip;
			iov[n].iov_len = len - skip;
			n++;
		}
		pos += DLSHIM_BLOCK_SIZE;
		b = e->next[b];
	}
	return n;
}

uint64_t dlshim_engine_load_done(struct dlshim_engine *e, int j, uint32_t it, int ok)
{
	if (it >= e->nitems || e->items[it].state != ITEM_LOADING)
		return 0;
	struct item *x = &e->items[it];
	uint32_t s = x->slot;
	struct job *jb = (j >= 0 && j < e->njobs) ? &e->jobs[j] : NULL;
	if (!ok) {
		x->state = ITEM_ABSENT;
		x->slot = NONE;
		eng_group_res_del(e, it);
		e->cs.items_resident--;
		e->pinned_slots--;
		slot_free(e, s);
		return 0;
	}
	struct dlshim_shm_slot *sl = &e->slots[s];
	uint64_t g = atomic_load_explicit(&sl->gen, memory_order_relaxed) + 1;
	atomic_store_explicit(&sl->gen, g, memory_order_release);
	e->sp[s].gen = g;
	index_put(e, x->dev, x->ino, s);
	e->sp[s].indexed = 1;
	x->state = ITEM_RESIDENT;
	e->cs.loads++;
	if (jb) {
		jb->st.files_loaded++;
		jb->st.bytes_from_disk += x->size;
	}
	return g;
}

int dlshim_engine_release(struct dlshim_engine *e, int j, uint32_t s, uint64_t gen, uint64_t bytes_cache,
			  uint64_t bytes_pass)
{
	if (j >= 0 && j < e->njobs) {
		e->jobs[j].st.bytes_from_cache += bytes_cache;
		e->jobs[j].st.bytes_passthrough += bytes_pass;
	}
	if (s == NONE)
		return 0;
	if (s >= e->nslots || !e->sp[s].used || (gen & 1) || e->sp[s].gen != gen || e->sp[s].pins == 0)
		return -1;
	if (--e->sp[s].pins > 0)
		return 0;
	e->pinned_slots--;
	uint32_t it = e->sp[s].item;
	if (it == NONE)
		slot_free(e, s); /* orphan of a changed file */
	else
		evict_add(&e->ev, it, eng_evict_key(&e->items[it]));
	return 0;
}

void dlshim_engine_fast_hit(struct dlshim_engine *e, int j, const struct dlshim_file_id *id)
{
	if (j < 0 || j >= e->njobs || !e->jobs[j].live)
		return;
	struct job *jb = &e->jobs[j];
	uint32_t it = eng_item_get(e, id);
	if (it == NONE)
		return;
	jb->st.requests++;
	jb->st.hits++;
	eng_job_need(e, jb, it);
	eng_job_consume(e, jb, it, it);
	evict_touch(&e->ev, it);
}

void dlshim_engine_note_rows(struct dlshim_engine *e, int j, uint64_t n, uint64_t redirects)
{
	if (j >= 0 && j < e->njobs) {
		e->jobs[j].st.requests += n;
		e->jobs[j].st.hits += n;
		e->jobs[j].st.row_index_hits += n;
		e->jobs[j].st.redirects += redirects;
	}
}

void dlshim_engine_note_pass(struct dlshim_engine *e, int j, uint64_t bytes)
{
	if (j >= 0 && j < e->njobs)
		e->jobs[j].st.bytes_passthrough += bytes;
}

/* ---- introspection ------------------------------------------------------- */

void dlshim_engine_job_stats(struct dlshim_engine *e, int j, struct dlshim_job_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (j < 0 || j >= e->njobs)
		return;
	struct job *jb = &e->jobs[j];
	*out = jb->st;
	if (jb->jg) { /* jobs with groups keep epochs per group; row mappings count too */
		uint64_t g = job_epochs_done(e, jb);
		out->epochs = g > jb->st.epochs ? g : jb->st.epochs;
	}
}

void dlshim_engine_cache_stats(struct dlshim_engine *e, struct dlshim_cache_stats *out)
{
	*out = e->cs;
	out->chunk_files = e->chunk_k;
	out->items_pinned = e->pinned_slots;
	out->items_known = e->nitems;
}

uint32_t dlshim_engine_item_refcnt(struct dlshim_engine *e, uint32_t it)
{
	return it < e->nitems ? e->items[it].refcnt : 0;
}
uint32_t dlshim_engine_item_holds(struct dlshim_engine *e, uint32_t it)
{
	return it < e->nitems ? e->items[it].holds : 0;
}

void dlshim_engine_item_spent(struct dlshim_engine *e, int j, uint64_t dev, uint64_t ino)
{
	uint32_t it = item_lookup(e, dev, ino);
	if (it != NONE && j >= 0 && j < e->njobs)
		e->jobs[j].st.bytes_consumed += e->items[it].size;
}

int dlshim_engine_item_hold(struct dlshim_engine *e, uint64_t dev, uint64_t ino, int delta)
{
	uint32_t it = item_lookup(e, dev, ino);
	if (it == NONE)
		return 0;
	struct item *x = &e->items[it];
	if (delta < 0 && x->holds < (uint32_t)-delta)
		x->holds = 0;
	else
		x->holds += (uint32_t)delta;
	evict_recount(&e->ev, it, eng_evict_key(x));
	return 1;
}
int dlshim_engine_item_resident(struct dlshim_engine *e, uint32_t it)
{
	return it < e->nitems && e->items[it].state == ITEM_RESIDENT;
}
int dlshim_engine_item_loading(struct dlshim_engine *e, uint32_t it)
{
	return it < e->nitems && e->items[it].state == ITEM_LOADING;
}
uint32_t dlshim_engine_item_pins(struct dlshim_engine *e, uint32_t it)
{
	return (it < e->nitems && e->items[it].slot != NONE) ? e->sp[e->items[it].slot].pins : 0;
}
