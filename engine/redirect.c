/* Redirection (redox's local access protocol, adapted to label groups and
 * variable file sizes): a request is served by a resident file of the same
 * group that the job has not consumed this epoch; only when none exists is
 * a physical chunk loaded, the one with the most files still useful. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- dataset declaration ---- */

static uint32_t ext_hash(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	const char *dot = strrchr(base, '.');
	if (dot == NULL || dot == base)
		return 0; /* no extension */
	uint32_t h = 2166136261u;
	for (const char *p = dot; *p; p++) {
		char c = (*p >= 'A' && *p <= 'Z') ? (char)(*p + 32) : *p;
		h = (h ^ (uint8_t)c) * 16777619u;
	}
	return h | 1;
}

static int is_hidden(const char *path)
{
	const char *base = strrchr(path, '/');
	return (base ? base[1] : path[0]) == '.';
}

static struct group *group_get(struct dlshim_engine *e, const char *key)
{
	struct group *g;
	HASH_FIND_STR(e->group_index, key, g);
	if (g)
		return g;
	if (e->ngroups == e->groups_cap) {
		uint32_t cap = e->groups_cap ? e->groups_cap * 2 : 64;
		struct group **n = realloc(e->groups, cap * sizeof(*n));
		if (n == NULL)
			return NULL;
		e->groups = n;
		e->groups_cap = cap;
	}
	g = calloc(1, sizeof(*g));
	if (g == NULL || (g->key = strdup(key)) == NULL) {
		free(g);
		return NULL;
	}
	g->id = e->ngroups;
	e->groups[e->ngroups++] = g;
	HASH_ADD_KEYPTR(hh, e->group_index, g->key, strlen(g->key), g);
	return g;
}

static int push(uint32_t **a, uint32_t *n, uint32_t *cap, uint32_t v)
{
	if (*n == *cap) {
		uint32_t c = *cap ? *cap * 2 : 16;
		uint32_t *p = realloc(*a, c * sizeof(uint32_t));
		if (p == NULL)
			return -1;
		*a = p;
		*cap = c;
	}
	(*a)[(*n)++] = v;
	return 0;
}

static int job_groups_reserve(struct job *jb, uint32_t n)
{
	if (n <= jb->njg)
		return 0;
	uint32_t c = jb->njg ? jb->njg : 64;
	while (c < n)
		c *= 2;
	struct jgroup *p = realloc(jb->jg, c * sizeof(*p));
	if (p == NULL)
		return -1;
	memset(p + jb->njg, 0, (c - jb->njg) * sizeof(*p));
	jb->jg = p;
	jb->njg = c;
	return 0;
}

uint32_t dlshim_engine_job_add_file(struct dlshim_engine *e, int j, const struct dlshim_file_id *id,
				    const char *path, const char *group)
{
	if (j < 0 || j >= e->njobs || !e->jobs[j].live)
		return NONE;
	struct job *jb = &e->jobs[j];
	uint32_t it = eng_item_get(e, id);
	if (it == NONE)
		return NONE;
	struct item *x = &e->items[it];
	if (x->path == NULL && path) {
		x->path = strdup(path);
		x->ext = ext_hash(path);
		x->hidden = (uint8_t)is_hidden(path);
	}
	/* Which group a file joins depends on the job's mode, known only at
	 * dataset_done: remember the pair until then. */
	uint32_t gid = NONE;
	if (group) {
		struct group *g = group_get(e, group);
		if (g)
			gid = g->id;
	}
	if (jb->npend == jb->pend_cap) {
		uint32_t cap = jb->pend_cap ? jb->pend_cap * 2 : 1024;
		uint32_t *a = realloc(jb->pend_item, cap * sizeof(uint32_t));
		if (a == NULL)
			return it;
		jb->pend_item = a;
		uint32_t *b = realloc(jb->pend_group, cap * sizeof(uint32_t));
		if (b == NULL)
			return it;
		jb->pend_group = b;
		jb->pend_cap = cap;
	}
	jb->pend_item[jb->npend] = it;
	jb->pend_group[jb->npend] = gid;
	jb->npend++;
	jb->declared++;
	return it;
}

/* Attach the files declared since the last dataset_done to their groups of
 * the job's kind, and to the job's dataset. */
static void attach_pending(struct dlshim_engine *e, struct job *jb)
{
	int kind = GKIND(jb);
	for (uint32_t i = 0; i < jb->npend; i++) {
		uint32_t it = jb->pend_item[i], gid = jb->pend_group[i];
		struct item *x = &e->items[it];
		if (gid != NONE && x->group[kind] == NONE) {
			/* The first declaration of a file fixes its group of a kind. */
			struct group *g = e->groups[gid];
			if (g->n == 0)
				g->kind = kind;
			if (g->kind == kind && push(&g->items, &g->n, &g->cap, it) == 0) {
				x->group[kind] = gid;
				g->dirty = 1;
				if (x->state != ITEM_ABSENT)
					eng_group_res_add(e, it);
			}
		}
		if (job_groups_reserve(jb, e->ngroups) == 0)
			eng_job_need(e, jb, it);
	}
	jb->npend = 0;
}

uint32_t dlshim_chunk_auto(uint64_t cache_bytes, uint32_t ngroups, uint64_t mean_file_bytes)
{
	/* Two chunks per group (the one being consumed and the one loading
	 * ahead) must fit in the cache; more than 64 files per chunk buys little. */
	if (ngroups == 0)
		ngroups = 1;
	if (mean_file_bytes == 0)
		mean_file_bytes = 1;
	uint64_t k = cache_bytes / (2ULL * ngroups * mean_file_bytes);
	if (k < 1)
		k = 1;
	if (k > 64)
		k = 64;
	return (uint32_t)k;
}

static struct dlshim_engine *sort_ctx;
static int by_inode(const void *a, const void *b)
{
	const struct item *x = &sort_ctx->items[*(const uint32_t *)a], *y = &sort_ctx->items[*(const uint32_t *)b];
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* Cut dirty groups into chunks of consecutive inodes: on the file systems
 * measured here inode order is allocation order, so a chunk reads nearly
 * sequentially. */
void redirect_cut_groups(struct dlshim_engine *e, uint32_t chunk)
{
	uint64_t total = 0, n = 0;
	for (uint32_t g = 0; g < e->ngroups; g++)
		for (uint32_t i = 0; i < e->groups[g]->n; i++) {
			total += e->items[e->groups[g]->items[i]].size;
			n++;
		}
	/* Fixed by the first dataset that has files (or an explicit size). */
	if (e->chunk_k == 0 && (n > 0 || chunk)) {
		e->chunk_k = chunk ? chunk : dlshim_chunk_auto(e->nblocks * DLSHIM_BLOCK_SIZE, e->ngroups,
								 n ? total / n : 1);
		if (e->chunk_k > DLSHIM_MAX_CHUNK)
			e->chunk_k = DLSHIM_MAX_CHUNK;
	}
	for (uint32_t g = 0; g < e->ngroups; g++) {
		struct group *gr = e->groups[g];
		if (!gr->dirty)
			continue;
		sort_ctx = e;
		qsort(gr->items, gr->n, sizeof(uint32_t), by_inode);
		gr->k = e->chunk_k ? e->chunk_k : 1;
		gr->nchunks = (gr->n + gr->k - 1) / gr->k;
		for (uint32_t i = 0; i < gr->n; i++)
			e->items[gr->items[i]].chunk[gr->kind] = i / gr->k;
		gr->dirty = 0;
	}
}

void dlshim_engine_job_dataset_done(struct dlshim_engine *e, int j, enum dlshim_redirect mode, uint32_t chunk)
{
	if (j < 0 || j >= e->njobs || !e->jobs[j].live)
		return;
	e->jobs[j].has_dataset = 1;
	e->jobs[j].mode = mode;
	attach_pending(e, &e->jobs[j]);
	redirect_cut_groups(e, chunk);
}

int dlshim_engine_job_rescan_due(struct dlshim_engine *e, int j)
{
	if (j < 0 || j >= e->njobs || !e->jobs[j].rescan_due)
		return 0;
	e->jobs[j].rescan_due = 0;
	return 1;
}

uint32_t dlshim_engine_job_epoch_current(struct dlshim_engine *e, int j)
{
	return (j >= 0 && j < e->njobs) ? e->jobs[j].max_epoch : 0;
}

int dlshim_engine_job_epoch_stats(struct dlshim_engine *e, int j, uint32_t epoch, struct dlshim_epoch_stats *out)
{
	if (j < 0 || j >= e->njobs)
		return -1;
	struct job *jb = &e->jobs[j];
	/* Epoch n runs from the snapshot taken when it started (n-1 for the
	 * first, which starts with the job at zero) to the next one, or now. */
	if (epoch > jb->max_epoch || epoch + EPOCH_HIST <= jb->max_epoch)
		return -1;
	struct dlshim_job_stats zero;
	memset(&zero, 0, sizeof(zero));
	const struct dlshim_job_stats *a = epoch ? &jb->hist[epoch % EPOCH_HIST] : &zero;
	const struct dlshim_job_stats *b = epoch < jb->max_epoch ? &jb->hist[(epoch + 1) % EPOCH_HIST] : &jb->st;
	uint64_t wa = epoch ? jb->hist_waste[epoch % EPOCH_HIST] : 0;
	uint64_t wb = epoch < jb->max_epoch ? jb->hist_waste[(epoch + 1) % EPOCH_HIST] : e->cs.waste_bytes;
	out->epoch = epoch;
	out->complete = epoch < jb->max_epoch;
	out->requests = b->requests - a->requests;
	out->redirects = b->redirects - a->redirects;
	out->chunk_loads = b->chunk_loads - a->chunk_loads;
	out->bytes_from_disk = b->bytes_from_disk - a->bytes_from_disk;
	out->bytes_consumed = b->bytes_consumed - a->bytes_consumed;
	out->waste_bytes = wb - wa;
	if (out->complete)
		out->order = jb->hist_order[epoch % EPOCH_HIST];
	else
		memset(&out->order, 0, sizeof(out->order));
	return 0;
}

int dlshim_engine_job_has_dataset(struct dlshim_engine *e, int j)
{
	return j >= 0 && j < e->njobs && e->jobs[j].has_dataset;
}

const char *dlshim_engine_item_path(struct dlshim_engine *e, uint32_t it)
{
	return it < e->nitems ? e->items[it].path : NULL;
}

uint64_t dlshim_engine_item_size(struct dlshim_engine *e, uint32_t it)
{
	return it < e->nitems ? e->items[it].size : 0;
}

void redirect_job_end(struct dlshim_engine *e, struct job *jb)
{
	dsa_job_end(e, jb);
	struct remap *m, *tmp;
	HASH_ITER(hh, jb->remaps, m, tmp) {
		HASH_DEL(jb->remaps, m);
		free(m);
	}
	free(jb->jg);
	jb->jg = NULL;
	jb->njg = 0;
	free(jb->pend_item);
	free(jb->pend_group);
	jb->pend_item = jb->pend_group = NULL;
	jb->npend = jb->pend_cap = 0;
}

/* ---- group resident lists ---- */

void eng_group_res_add(struct dlshim_engine *e, uint32_t it)
{
	struct item *x = &e->items[it];
	for (int k = 0; k < 2; k++) {
		if (x->group[k] == NONE || x->gres_pos[k] != NONE)
			continue;
		struct group *g = e->groups[x->group[k]];
		if (push(&g->res, &g->nres, &g->rescap, it) == 0)
			x->gres_pos[k] = g->nres - 1;
	}
}

void eng_group_res_del(struct dlshim_engine *e, uint32_t it)
{
	struct item *x = &e->items[it];
	for (int k = 0; k < 2; k++) {
		if (x->group[k] == NONE || x->gres_pos[k] == NONE)
			continue;
		struct group *g = e->groups[x->group[k]];
		uint32_t last = g->res[--g->nres];
		g->res[x->gres_pos[k]] = last;
		e->items[last].gres_pos[k] = x->gres_pos[k];
		x->gres_pos[k] = NONE;
	}
}

/* ---- the decision ---- */

#define candidate eng_candidate

/* A new group epoch: the job needs every member again. */
static void group_reset(struct dlshim_engine *e, struct job *jb, struct group *g)
{
	for (uint32_t i = 0; i < g->n; i++) {
		uint32_t it = g->items[i];
		if (bit_get(jb->needed, it) && bit_get(jb->consumed, it)) {
			bit_clr(jb->consumed, it);
			jb->consumed_count--;
			e->items[it].refcnt++;
			evict_recount(&e->ev, it, eng_evict_key(&e->items[it]));
		}
	}
	jb->jg[g->id].cons = 0;
	jb->jg[g->id].epoch++;
}

/* The first group (or HDF5 row mapping) to start a new epoch starts it for
 * the whole job: every other complete group rolls over too (the job needs
 * all their files again, which RefCnt must see now), the coordinator
 * rescans the job's roots so files added meanwhile take part, and the
 * statistics of the epoch that ended are kept. */
static void job_epoch_start(struct dlshim_engine *e, struct job *jb, uint32_t epoch)
{
	order_epoch_end(e, jb, &jb->hist_order[jb->max_epoch % EPOCH_HIST]);
	jb->max_epoch = epoch;
	jb->rescan_due = jb->has_dataset;
	jb->hist[epoch % EPOCH_HIST] = jb->st;
	jb->hist_waste[epoch % EPOCH_HIST] = e->cs.waste_bytes;
	for (uint32_t g = 0; g < jb->njg && g < e->ngroups; g++) {
		struct jgroup *x = &jb->jg[g];
		if (x->size && x->cons >= x->size && x->epoch < epoch)
			group_reset(e, jb, e->groups[g]);
	}
}

void eng_group_rollover(struct dlshim_engine *e, struct job *jb, uint32_t gid)
{
	group_reset(e, jb, e->groups[gid]);
	if (jb->jg[gid].epoch > jb->max_epoch)
		job_epoch_start(e, jb, jb->jg[gid].epoch);
}

void dlshim_engine_job_rows_epoch(struct dlshim_engine *e, int j, uint32_t epoch)
{
	if (j < 0 || j >= e->njobs || !e->jobs[j].live || epoch <= e->jobs[j].max_epoch)
		return;
	struct job *jb = &e->jobs[j];
	if (jb->st.epochs < epoch)
		jb->st.epochs = epoch; /* epochs completed, when no file group counts more */
	job_epoch_start(e, jb, epoch);
}

/* Resident (or loading, when `loading`) unconsumed stand-in; the requested
 * file itself first. */
static uint32_t pick(struct dlshim_engine *e, struct job *jb, uint32_t req, int state)
{
	struct item *rq = &e->items[req];
	if (rq->state == state && candidate(jb, rq, rq, req))
		return req;
	struct group *g = e->groups[rq->group[GKIND(jb)]];
	/* Scan from a rotating start so stand-ins do not always come from the
	 * front of the list. */
	uint32_t n = g->nres, start = n ? (uint32_t)(jb->st.requests % n) : 0;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t it = g->res[(start + k) % n];
		if (e->items[it].state == state && candidate(jb, rq, &e->items[it], it))
			return it;
	}
	return NONE;
}

/* redox's FindReplacePC: the chunk with the most files this job still
 * needs (ties: the requested file's own chunk). */
static uint32_t choose_chunk(struct dlshim_engine *e, struct job *jb, uint32_t req)
{
	struct item *rq = &e->items[req];
	struct group *g = e->groups[rq->group[GKIND(jb)]];
	uint32_t best = NONE, best_n = 0;
	for (uint32_t c = 0; c < g->nchunks; c++) {
		uint32_t n = 0;
		uint32_t end = (c + 1) * g->k < g->n ? (c + 1) * g->k : g->n;
		for (uint32_t i = c * g->k; i < end; i++) {
			uint32_t it = g->items[i];
			n += e->items[it].state == ITEM_ABSENT && candidate(jb, rq, &e->items[it], it);
		}
		if (n > best_n || (n == best_n && n > 0 && c == rq->chunk[GKIND(jb)])) {
			best = c;
			best_n = n;
		}
	}
	return best;
}

static int try_load(struct dlshim_engine *e, struct job *jb, uint32_t it, struct dlshim_open_result *res,
		    uint64_t *bytes, uint64_t budget, int spare)
{
	struct item *x = &e->items[it];
	if (x->state != ITEM_ABSENT || x->refcnt == 0 || x->path == NULL || res->nload >= DLSHIM_MAX_CHUNK)
		return 0;
	if (res->nload > 0 && *bytes + x->size > budget)
		return -1;
	if (eng_start_load(e, jb, it, spare) < 0)
		return -1; /* cache full of pinned (or, spare, needed) items: load what fits */
	res->load_item[res->nload] = it;
	res->load_slot[res->nload] = x->slot;
	res->nload++;
	*bytes += x->size;
	return 1;
}

/* Start loading the absent members of chunk `c` that some live job still
 * needs: first those this job has not read (they are why the chunk is
 * read), then those only other jobs need. One chunk never takes more than a
 * quarter of the cache, whatever DLSHIM_CHUNK says. Returns the number
 * started (listed in res). */
static uint32_t load_chunk(struct dlshim_engine *e, struct job *jb, struct group *g, uint32_t c, uint32_t req,
			   int spare, struct dlshim_open_result *res)
{
	struct item *rq = &e->items[req];
	uint32_t end = (c + 1) * g->k < g->n ? (c + 1) * g->k : g->n;
	uint64_t bytes = 0, budget = e->nblocks * DLSHIM_BLOCK_SIZE / 4;
	res->nload = 0;
	int full = 0;
	for (int pass = 0; pass < 2 && !full; pass++)
		for (uint32_t i = c * g->k; i < end && !full; i++) {
			uint32_t it = g->items[i];
			if (candidate(jb, rq, &e->items[it], it) != (pass == 0))
				continue;
			full = try_load(e, jb, it, res, &bytes, budget, spare) < 0;
		}
	if (res->nload) {
		jb->st.chunk_loads++;
		jb->st.misses++;
	}
	return res->nload;
}

/* An unread file of the request's group in any state, the request first. */
static uint32_t any_unread(struct dlshim_engine *e, struct job *jb, uint32_t req)
{
	struct item *rq = &e->items[req];
	if (candidate(jb, rq, rq, req))
		return req;
	struct group *g = e->groups[rq->group[GKIND(jb)]];
	for (uint32_t i = 0; i < g->n; i++)
		if (candidate(jb, rq, &e->items[g->items[i]], g->items[i]))
			return g->items[i];
	return NONE;
}

/* Hand `served` to the caller: pinned if resident, else WAIT or a one-file
 * load. With `nowait` a file still loading is read from disk by the client
 * instead (through the served file's descriptor), so what the engine
 * recorded as consumed is what the client reads. */
static void serve(struct dlshim_engine *e, struct job *jb, uint32_t served, int nowait,
		  struct dlshim_open_result *res)
{
	struct item *x = &e->items[served];
	res->item = served;
	res->size = x->size;
	if (x->state == ITEM_RESIDENT) {
		eng_hit(e, jb, served, res);
		return;
	}
	if (x->state == ITEM_LOADING && !nowait) {
		res->kind = DLSHIM_OPEN_WAIT;
		jb->st.waits++;
		return;
	}
	if (x->state != ITEM_LOADING && x->path && eng_start_load(e, jb, served, 0) == 0) {
		res->kind = DLSHIM_OPEN_LOAD_CHUNK;
		res->nload = 1;
		res->load_item[0] = served;
		res->load_slot[0] = x->slot;
		jb->st.misses++;
		return;
	}
	res->kind = DLSHIM_OPEN_PASS;
	jb->st.passthrough++;
}

/* Load ahead: when fewer than half a chunk of the group's files are
 * resident (or on their way) for this job, start its next chunk now, so
 * that in steady state a request never waits for the disk. The loads ride
 * back in res->load_* with res->ahead set; the caller does them after
 * replying. */
static void load_ahead(struct dlshim_engine *e, struct job *jb, struct item *rq, struct dlshim_open_result *res)
{
	struct group *g = e->groups[rq->group[GKIND(jb)]];
	uint32_t want = g->k / 2 ? g->k / 2 : 1, have = 0;
	for (uint32_t k = 0; k < g->nres && have < want; k++) {
		uint32_t it = g->res[k];
		have += candidate(jb, rq, &e->items[it], it);
	}
	if (have >= want)
		return;
	uint32_t req = (uint32_t)(rq - e->items);
	uint32_t c = choose_chunk(e, jb, req);
	if (c == NONE)
		return;
	uint64_t misses = jb->st.misses;
	if (load_chunk(e, jb, g, c, req, 1, res) > 0) {
		res->ahead = 1;
		jb->st.misses = misses; /* nobody missed: this is ahead of demand */
		jb->st.loads_ahead++;
	}
}

static void remember(struct job *jb, uint32_t req, uint32_t served, uint32_t epoch)
{
	struct remap *m;
	HASH_FIND(hh, jb->remaps, &req, sizeof(req), m);
	if (m == NULL) {
		m = calloc(1, sizeof(*m));
		if (m == NULL)
			return;
		m->req = req;
		HASH_ADD(hh, jb->remaps, req, sizeof(m->req), m);
	}
	m->served = served;
	m->epoch = epoch;
}

/* The file served for `req` could not be delivered (its load failed, its
 * home node is gone, it changed at open): it stays consumed for this group
 * epoch (it is unavailable), and the request's decision is dropped so that
 * the next open of `req` decides anew. */
int dlshim_engine_forget_served(struct dlshim_engine *e, int j, uint32_t req)
{
	if (j < 0 || j >= e->njobs || !e->jobs[j].live || req >= e->nitems)
		return 0;
	struct job *jb = &e->jobs[j];
	struct remap *m;
	HASH_FIND(hh, jb->remaps, &req, sizeof(req), m);
	if (m == NULL)
		return 0; /* not decided by redirection (exact mode, outside the dataset) */
	/* The stand-in was not delivered: it is no redirect and no bytes the
	 * job consumed (it stays consumed only so as not to be chosen again).
	 * Never below the running epoch's starting counts (the decision may
	 * have started this epoch), so per-epoch differences stay whole. */
	const struct dlshim_job_stats *base = jb->max_epoch ? &jb->hist[jb->max_epoch % EPOCH_HIST] : NULL;
	if (m->served != req && jb->st.redirects > (base ? base->redirects : 0))
		jb->st.redirects--;
	uint64_t sz = m->served < e->nitems ? e->items[m->served].size : 0, low = base ? base->bytes_consumed : 0;
	jb->st.bytes_consumed = jb->st.bytes_consumed - low > sz ? jb->st.bytes_consumed - sz : low;
	HASH_DEL(jb->remaps, m);
	free(m);
	jb->st.redecided++;
	return 1;
}

int dlshim_engine_item_group(struct dlshim_engine *e, int j, uint32_t item, const char **key, uint32_t *size)
{
	if (j < 0 || j >= e->njobs || !e->jobs[j].live || item >= e->nitems)
		return -1;
	struct job *jb = &e->jobs[j];
	uint32_t gid = jb->mode == DLSHIM_REDIRECT_OFF ? NONE : e->items[item].group[GKIND(jb)];
	if (gid == NONE || !bit_get(jb->needed, item))
		return -1;
	*key = e->groups[gid]->key;
	*size = gid < jb->njg && jb->jg[gid].size ? jb->jg[gid].size : e->groups[gid]->n;
	return 0;
}

uint32_t dlshim_engine_group_catch_up(struct dlshim_engine *e, int j, uint32_t item, uint32_t epoch, int consumed)
{
	if (j < 0 || j >= e->njobs || !e->jobs[j].live || item >= e->nitems)
		return UINT32_MAX;
	struct job *jb = &e->jobs[j];
	uint32_t gid = jb->mode == DLSHIM_REDIRECT_OFF ? NONE : e->items[item].group[GKIND(jb)];
	if (gid == NONE || !bit_get(jb->needed, item) || job_groups_reserve(jb, e->ngroups) < 0)
		return UINT32_MAX;
	/* One rollover per epoch skipped: each resets the group (O(members)),
	 * and a job is rarely more than one epoch behind its other nodes; a
	 * far jump skips the empty epochs' bookkeeping. */
	if (epoch > jb->jg[gid].epoch + 8)
		jb->jg[gid].epoch = epoch - 8;
	while (jb->jg[gid].epoch < epoch)
		eng_group_rollover(e, jb, gid);
	if (consumed && jb->jg[gid].epoch == epoch)
		eng_job_consume_elsewhere(e, jb, item);
	return jb->jg[gid].epoch;
}

void redirect_open(struct dlshim_engine *e, int j, uint32_t req, unsigned flags, struct dlshim_open_result *res)
{
	int nowait = (flags & DLSHIM_OPEN_F_NOWAIT) != 0;
	struct job *jb = &e->jobs[j];
	struct item *rq = &e->items[req];
	struct group *g = e->groups[rq->group[GKIND(jb)]];
	res->requested = req;
	if (job_groups_reserve(jb, e->ngroups) < 0 || !bit_get(jb->needed, req)) {
		/* Not part of this job's declared dataset: serve it exactly. */
		serve(e, jb, req, nowait, res);
		return;
	}
	struct jgroup *jg = &jb->jg[g->id];

	/* The same sample opened again this epoch gets the same file. (The
	 * group's epoch rolls over as soon as its last file is served, so a
	 * re-open of that last file already belongs to the next epoch: it cannot
	 * be told apart from the next epoch's first request.) */
	struct remap *m;
	HASH_FIND(hh, jb->remaps, &req, sizeof(req), m);
	if (m && m->epoch == jg->epoch) {
		serve(e, jb, m->served, nowait, res);
		res->repeat = 1;
		res->gepoch = m->epoch;
		return;
	}

	if (jb->sampler == DLSHIM_SAMPLER_DSA) {
		/* The job's next draw from the group's shared sampler. */
		uint32_t it = dsa_choose(e, jb, g, req);
		if (it != NONE && e->items[it].state == ITEM_LOADING && !nowait) {
			/* drawn by another job a moment ago: wait, keep the draw */
			dsa_hold(jb, g, it);
			res->kind = DLSHIM_OPEN_WAIT;
			res->item = req;
			jb->st.waits++;
			return;
		}
		if (it != NONE) {
			uint32_t ep = jg->epoch;
			eng_job_consume(e, jb, req, it);
			remember(jb, req, it, ep);
			res->decided = 1;
			res->gepoch = ep;
			if (it != req)
				jb->st.redirects++;
			serve(e, jb, it, nowait, res);
			if (res->kind == DLSHIM_OPEN_HIT || res->kind == DLSHIM_OPEN_LOAD_CHUNK)
				dsa_load_ahead(e, jb, g, res);
			return;
		}
		/* no usable draw (sampler out of memory): the chunk sampler decides */
	}
	uint32_t served = pick(e, jb, req, ITEM_RESIDENT);
	if (served == NONE && !nowait && pick(e, jb, req, ITEM_LOADING) != NONE) {
		/* A chunk with files for us is on its way: wait for it rather
		 * than load another. */
		res->kind = DLSHIM_OPEN_WAIT;
		res->item = req;
		jb->st.waits++;
		return;
	}
	if (served == NONE) {
		uint32_t c = choose_chunk(e, jb, req);
		if (c != NONE && load_chunk(e, jb, g, c, req, 0, res) > 0) {
			/* Serve from what we load: the requested file if it is there. */
			for (uint32_t i = 0; i < res->nload && served != req; i++) {
				uint32_t it = res->load_item[i];
				if (candidate(jb, rq, &e->items[it], it) && (served == NONE || it == req))
					served = it;
			}
		}
		/* Nothing loadable for us (no space): still never a file this job
		 * already read this epoch; the requested one only when the group
		 * has no unread file of its extension at all. */
		if (served == NONE)
			served = any_unread(e, jb, req);
		if (served == NONE)
			served = req;
	}
	uint32_t epoch = jg->epoch; /* consuming the group's last file rolls it over */
	eng_job_consume(e, jb, req, served);
	remember(jb, req, served, epoch);
	res->decided = 1;
	res->gepoch = epoch;
	if (served != req)
		jb->st.redirects++;
	if (res->nload > 0) {
		/* Loads are pending for the caller: the served file must be one
		 * of them, resident (pinned now), or read from disk directly. */
		struct item *x = &e->items[served];
		res->item = served;
		res->size = x->size;
		int listed = 0;
		for (uint32_t i = 0; i < res->nload; i++)
			listed |= res->load_item[i] == served;
		if (listed) {
			res->kind = DLSHIM_OPEN_LOAD_CHUNK;
		} else if (x->state == ITEM_RESIDENT) {
			eng_hit(e, jb, served, res);
		} else {
			res->kind = DLSHIM_OPEN_PASS;
			jb->st.passthrough++;
		}
		return;
	}
	serve(e, jb, served, nowait, res);
	if (res->kind == DLSHIM_OPEN_HIT)
		load_ahead(e, jb, rq, res);
}

/* Upcoming files of a job for a remote prefetch: absent members of the
 * request's group that the job has not read this group epoch and that
 * `want` accepts, each given a slot (pinned for the loader, as in a chunk
 * load). At most `max` files and an eighth of the cache. */
uint32_t dlshim_engine_group_absent(struct dlshim_engine *e, int j, uint32_t req, int (*want)(void *ctx, uint32_t item),
				    void *ctx, uint32_t *items, uint32_t *slots, uint32_t max)
{
	if (j < 0 || j >= e->njobs || req >= e->nitems)
		return 0;
	struct job *jb = &e->jobs[j];
	struct item *rq = &e->items[req];
	if (!jb->live || jb->mode == DLSHIM_REDIRECT_OFF || rq->group[GKIND(jb)] == NONE)
		return 0;
	struct group *g = e->groups[rq->group[GKIND(jb)]];
	uint64_t bytes = 0, budget = e->nblocks * DLSHIM_BLOCK_SIZE / 8;
	uint32_t n = 0;
	/* From a rotating start, so concurrent requests spread over the group. */
	uint32_t start = g->n ? g->pf_next % g->n : 0;
	for (uint32_t k = 0; k < g->n && n < max; k++) {
		uint32_t it = g->items[(start + k) % g->n];
		g->pf_next = start + k + 1;
		struct item *x = &e->items[it];
		if (it == req || x->state != ITEM_ABSENT || x->path == NULL || !candidate(jb, rq, x, it) || !want(ctx, it))
			continue;
		if (bytes + x->size > budget || eng_start_load(e, jb, it, 0) < 0)
			break;
		bytes += x->size;
		items[n] = it;
		slots[n++] = x->slot;
	}
	return n;
}
