/* Dependent sampling tree (JOADER, sections 3-4 and appendix C).
 *
 * Representation. Every item sits in exactly one *cell*: the set of items
 * whose "jobs that have not drawn it this epoch" are the same job set (the
 * cell's signature). A vertex of the paper's tree (the intersection of the
 * remaining datasets of a suffix of the jobs sorted by size, minus what the
 * vertices above it hold) is the union of the cells whose signature contains
 * that suffix; we keep the finest partition and form the vertices while
 * walking, which stays exact for every overlap pattern (the paper's binary
 * tree drops intersections of non-suffix job sets) and makes the tree
 * operations local:
 *   - insertion adds the job's bit to its items (cells split, O(|D|));
 *   - deletion only marks the job dead, O(1) plus its queued draws: a dead
 *     job's bit is ignored wherever a signature is read (every test is
 *     against live jobs), and an item sheds it whenever it moves anyway
 *     (drawn, or added back at an epoch end), so cells that differ only by
 *     dead jobs are the same cell to the sampler. The slot is not handed out
 *     again while its bit may remain. One sweep strips every dead bit (cells
 *     merge, O(cells) plus the smaller side of each merge) for all the jobs
 *     that died since the last one: in a round, once rounds have walked
 *     DLSHIM_DSA_SWEEP_RATIO times the cells since a death (the unmerged
 *     cells slow rounds down; this bounds that cost by the sweep's), when
 *     no clean slot is left for an insertion, or on dlshim_dsa_compact;
 *   - a draw by job j removes only j's bit from the item, so the item stays
 *     in the remaining sets of the jobs that still need it: this is the
 *     paper's compensation, done in O(1);
 *   - the jobs of a round are sorted by remaining size at every round, which
 *     is the paper's reordering after partial sampling.
 *
 * A round (algorithm 1 of the paper, with exclusions in closed form): jobs P
 * sorted by remaining size n_1 <= n_2 <= ...; X(P) = items whose signature
 * contains P. The vertex is I = X(P) - X(P_prev) where P_prev is the job set
 * of the level above (its vertex is excluded); job i's remaining set below
 * the excluded part has n_i - X(P_prev) items. J_1 takes I with probability
 * |I|/n_1, J_i follows J_{i-1} with probability n_{i-1}/n_i; the jobs that
 * took I share one uniform item of I; if nobody did, J_1 draws uniformly from
 * its part outside I. The others repeat one level down. Each job's draw is
 * uniform over its remaining set (appendix D), and two jobs share with
 * probability |I|/max(|D1|,|D2|).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "dlshim/dsa.h"

#define NONE DLSHIM_DSA_NONE
#define MAXJ DLSHIM_DSA_MAX_JOBS

typedef struct dlshim_dsa_mask mask_t;

static inline int m_has(mask_t m, int j) { return (m.w[j >> 6] >> (j & 63)) & 1; }
static inline void m_set(mask_t *m, int j) { m->w[j >> 6] |= 1ULL << (j & 63); }
static inline void m_clr(mask_t *m, int j) { m->w[j >> 6] &= ~(1ULL << (j & 63)); }
static inline int m_sup(mask_t a, mask_t b) { return (a.w[0] & b.w[0]) == b.w[0] && (a.w[1] & b.w[1]) == b.w[1]; }
static inline int m_empty(mask_t m) { return (m.w[0] | m.w[1]) == 0; }
static inline mask_t m_andnot(mask_t a, mask_t b) { return (mask_t){{a.w[0] & ~b.w[0], a.w[1] & ~b.w[1]}}; }
static inline mask_t m_and(mask_t a, mask_t b) { return (mask_t){{a.w[0] & b.w[0], a.w[1] & b.w[1]}}; }

struct cell {
	mask_t sig;                /* jobs that have not drawn these items this epoch */
	uint32_t *it, n, cap;
	uint32_t id, live_pos;     /* live_pos NONE while free */
	uint32_t s;                /* during a round: first suffix of the order it contains */
	uint32_t memo_stamp, memo_dest; /* insertion: where this cell's items go */
	UT_hash_handle hh;
};

struct djob {
	int live;
	uint32_t *ds, nds, dscap;  /* dataset */
	uint64_t *in;              /* dataset membership bitmap */
	uint32_t inwords;
	uint32_t rem, epoch;       /* items not drawn this epoch; epochs started */
	uint32_t *q, qhead, qlen, qcap; /* drawn, not yet taken by next() */
};

struct inode_key {
	struct {
		uint64_t dev, ino;
	} key;
	uint32_t item;
	UT_hash_handle hh;
};

struct dlshim_dsa {
	uint64_t rng;
	uint32_t nitems, icap;
	uint32_t *cell_of, *pos, *pending;
	struct inode_key *index;
	struct cell **cells;
	uint32_t ncells, ccap;
	uint32_t *free_cells, nfree;
	uint32_t *live, nlive;     /* cells holding items */
	uint32_t *sorted, sorted_cap; /* during a round: live cells by suffix bucket */
	uint32_t bstart[MAXJ + 2];
	struct cell *by_sig;
	struct djob jobs[MAXJ];
	mask_t dead;               /* removed jobs whose bits cells may still hold */
	uint64_t walked;           /* cells walked by rounds while dead is not empty */
	uint32_t sweep_ratio;
	uint32_t window, stamp;
};

/* ---- randomness ---------------------------------------------------------- */

static uint64_t rnd64(struct dlshim_dsa *d)
{
	uint64_t z = (d->rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, n), n > 0, without modulo bias (Lemire). */
static uint64_t below(struct dlshim_dsa *d, uint64_t n)
{
	unsigned __int128 m = (unsigned __int128)rnd64(d) * n;
	uint64_t lo = (uint64_t)m;
	if (lo < n) {
		uint64_t t = -n % n;
		while (lo < t) {
			m = (unsigned __int128)rnd64(d) * n;
			lo = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

/* ---- growth helpers ------------------------------------------------------- */

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	uint32_t c = *cap ? *cap : 16;
	while (c < need)
		c = c > UINT32_MAX / 2 ? need : c * 2;
	void *n = realloc(*p, (size_t)c * elem);
	if (n == NULL)
		return -1;
	*p = n;
	*cap = c;
	return 0;
}

/* ---- cells ---------------------------------------------------------------- */

static void live_del(struct dlshim_dsa *d, struct cell *c)
{
	uint32_t last = d->live[--d->nlive];
	d->live[c->live_pos] = last;
	d->cells[last]->live_pos = c->live_pos;
	c->live_pos = NONE;
}

/* The cell with signature `sig`, created empty if needed; NONE on failure. */
static uint32_t cell_get(struct dlshim_dsa *d, mask_t sig)
{
	struct cell *c;
	HASH_FIND(hh, d->by_sig, &sig, sizeof(sig), c);
	if (c)
		return c->id;
	uint32_t id;
	if (d->nfree) {
		id = d->free_cells[--d->nfree];
	} else {
		if (d->ncells == d->ccap) {
			/* free_cells and live never hold more than ncells entries */
			uint32_t cap = d->ccap ? d->ccap * 2 : 16;
			struct cell **a = realloc(d->cells, cap * sizeof(*a));
			if (a)
				d->cells = a;
			uint32_t *f = a ? realloc(d->free_cells, cap * sizeof(uint32_t)) : NULL;
			if (f)
				d->free_cells = f;
			uint32_t *l = f ? realloc(d->live, cap * sizeof(uint32_t)) : NULL;
			if (l == NULL)
				return NONE;
			d->live = l;
			d->ccap = cap;
		}
		c = calloc(1, sizeof(*c));
		if (c == NULL)
			return NONE;
		id = d->ncells++;
		c->id = id;
		d->cells[id] = c;
	}
	c = d->cells[id];
	c->sig = sig;
	c->n = 0;
	c->memo_stamp = 0;
	c->live_pos = d->nlive;
	d->live[d->nlive++] = id;
	HASH_ADD(hh, d->by_sig, sig, sizeof(c->sig), c);
	return id;
}

static void cell_release(struct dlshim_dsa *d, struct cell *c)
{
	HASH_DEL(d->by_sig, c);
	live_del(d, c);
	d->free_cells[d->nfree++] = c->id;
}

static int cell_append(struct dlshim_dsa *d, uint32_t cid, uint32_t it)
{
	struct cell *c = d->cells[cid];
	if (grow((void **)&c->it, &c->cap, c->n + 1, sizeof(uint32_t)))
		return -1;
	d->cell_of[it] = cid;
	d->pos[it] = c->n;
	c->it[c->n++] = it;
	return 0;
}

/* Move an item to cell `to`; an emptied cell is released. */
static int item_move(struct dlshim_dsa *d, uint32_t it, uint32_t to)
{
	uint32_t from = d->cell_of[it];
	if (from == to)
		return 0;
	struct cell *to_c = d->cells[to];
	if (grow((void **)&to_c->it, &to_c->cap, to_c->n + 1, sizeof(uint32_t)))
		return -1;
	struct cell *c = d->cells[from];
	uint32_t last = c->it[--c->n];
	c->it[d->pos[it]] = last;
	d->pos[last] = d->pos[it];
	cell_append(d, to, it);
	if (c->n == 0)
		cell_release(d, c);
	return 0;
}

/* Give item `it` the signature of its cell with job j added; the target
 * cell is remembered per source cell for the length of one insertion. */
static int item_add_job(struct dlshim_dsa *d, uint32_t it, int j)
{
	struct cell *c = d->cells[d->cell_of[it]];
	if (c->memo_stamp != d->stamp) {
		mask_t sig = m_andnot(c->sig, d->dead);
		m_set(&sig, j);
		uint32_t to = cell_get(d, sig);
		if (to == NONE)
			return -1;
		c->memo_stamp = d->stamp;
		c->memo_dest = to;
	}
	return item_move(d, it, c->memo_dest);
}

static int item_drop_jobs(struct dlshim_dsa *d, uint32_t it, mask_t jobs)
{
	uint32_t to = cell_get(d, m_andnot(m_andnot(d->cells[d->cell_of[it]]->sig, jobs), d->dead));
	return to == NONE ? -1 : item_move(d, it, to);
}

/* ---- lifecycle ------------------------------------------------------------- */

struct dlshim_dsa *dlshim_dsa_create(uint64_t seed)
{
	struct dlshim_dsa *d = calloc(1, sizeof(*d));
	if (d == NULL)
		return NULL;
	d->rng = seed ^ 0x6a09e667f3bcc909ULL;
	d->window = 64;
	d->sweep_ratio = DLSHIM_DSA_SWEEP_RATIO;
	d->stamp = 1;
	return d;
}

static void job_free(struct djob *jb)
{
	free(jb->ds);
	free(jb->in);
	free(jb->q);
	memset(jb, 0, sizeof(*jb));
}

void dlshim_dsa_destroy(struct dlshim_dsa *d)
{
	if (d == NULL)
		return;
	for (int j = 0; j < MAXJ; j++)
		job_free(&d->jobs[j]);
	HASH_CLEAR(hh, d->by_sig);
	for (uint32_t i = 0; i < d->ncells; i++) {
		free(d->cells[i]->it);
		free(d->cells[i]);
	}
	struct inode_key *k, *t;
	HASH_ITER(hh, d->index, k, t) {
		HASH_DEL(d->index, k);
		free(k);
	}
	free(d->cells);
	free(d->free_cells);
	free(d->live);
	free(d->sorted);
	free(d->cell_of);
	free(d->pos);
	free(d->pending);
	free(d);
}

uint32_t dlshim_dsa_item(struct dlshim_dsa *d, uint64_t dev, uint64_t ino)
{
	struct inode_key q, *k;
	memset(&q, 0, sizeof(q));
	q.key.dev = dev;
	q.key.ino = ino;
	HASH_FIND(hh, d->index, &q.key, sizeof(q.key), k);
	if (k)
		return k->item;
	uint32_t it = d->nitems, cap = d->icap;
	if (it == NONE - 1)
		return NONE;
	if (it + 1 > cap) {
		uint32_t c = cap;
		if (grow((void **)&d->cell_of, &c, it + 1, sizeof(uint32_t)))
			return NONE;
		c = cap;
		if (grow((void **)&d->pos, &c, it + 1, sizeof(uint32_t)))
			return NONE;
		c = cap;
		if (grow((void **)&d->pending, &c, it + 1, sizeof(uint32_t)))
			return NONE;
		d->icap = c;
	}
	uint32_t cid = cell_get(d, (mask_t){{0, 0}});
	k = calloc(1, sizeof(*k));
	if (cid == NONE || k == NULL || cell_append(d, cid, it) < 0) {
		free(k);
		if (cid != NONE && d->cells[cid]->n == 0)
			cell_release(d, d->cells[cid]);
		return NONE;
	}
	d->pending[it] = 0;
	d->nitems++;
	k->key = q.key;
	k->item = it;
	HASH_ADD(hh, d->index, key, sizeof(k->key), k);
	return it;
}

uint32_t dlshim_dsa_find(const struct dlshim_dsa *d, uint64_t dev, uint64_t ino)
{
	struct inode_key q, *k;
	memset(&q, 0, sizeof(q));
	q.key.dev = dev;
	q.key.ino = ino;
	HASH_FIND(hh, d->index, &q.key, sizeof(q.key), k);
	return k ? k->item : NONE;
}

uint32_t dlshim_dsa_nitems(const struct dlshim_dsa *d) { return d->nitems; }

static int valid_job(const struct dlshim_dsa *d, int j) { return j >= 0 && j < MAXJ && d->jobs[j].live; }

int dlshim_dsa_job_live(const struct dlshim_dsa *d, int j) { return valid_job(d, j); }
uint32_t dlshim_dsa_job_size(const struct dlshim_dsa *d, int j) { return valid_job(d, j) ? d->jobs[j].nds : 0; }
uint32_t dlshim_dsa_job_epoch(const struct dlshim_dsa *d, int j) { return valid_job(d, j) ? d->jobs[j].epoch : 0; }
uint32_t dlshim_dsa_queued(const struct dlshim_dsa *d, int j) { return valid_job(d, j) ? d->jobs[j].qlen : 0; }
void dlshim_dsa_set_window(struct dlshim_dsa *d, uint32_t window) { d->window = window; }
void dlshim_dsa_set_sweep_ratio(struct dlshim_dsa *d, uint32_t ratio) { d->sweep_ratio = ratio; }
uint32_t dlshim_dsa_ncells(const struct dlshim_dsa *d) { return d->nlive; }
uint32_t dlshim_dsa_ndead(const struct dlshim_dsa *d)
{
	return (uint32_t)(__builtin_popcountll(d->dead.w[0]) + __builtin_popcountll(d->dead.w[1]));
}

int dlshim_dsa_job_extend(struct dlshim_dsa *d, int j, const uint32_t *items, uint32_t n)
{
	if (!valid_job(d, j))
		return -1;
	struct djob *jb = &d->jobs[j];
	uint32_t words = (d->nitems + 63) / 64;
	if (words > jb->inwords) {
		uint64_t *b = realloc(jb->in, words * sizeof(uint64_t));
		if (b == NULL)
			return -1;
		memset(b + jb->inwords, 0, (words - jb->inwords) * sizeof(uint64_t));
		jb->in = b;
		jb->inwords = words;
	}
	if (grow((void **)&jb->ds, &jb->dscap, jb->nds + n, sizeof(uint32_t)))
		return -1;
	d->stamp++;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t it = items[i];
		if (it >= d->nitems || (jb->in[it / 64] >> (it % 64) & 1))
			continue;
		if (item_add_job(d, it, j) < 0)
			return -1;
		jb->in[it / 64] |= 1ULL << (it % 64);
		jb->ds[jb->nds++] = it;
		jb->rem++;
	}
	return 0;
}

/* A slot that is free and whose bit no cell holds (sweeping if need be). */
static int free_slot(struct dlshim_dsa *d)
{
	for (int pass = 0; pass < 2; pass++) {
		for (int j = 0; j < MAXJ; j++)
			if (!d->jobs[j].live && !m_has(d->dead, j))
				return j;
		if (m_empty(d->dead) || dlshim_dsa_compact(d) < 0)
			return -1;
	}
	return -1;
}

int dlshim_dsa_job_add(struct dlshim_dsa *d, const uint32_t *items, uint32_t n)
{
	int j = free_slot(d);
	if (j < 0)
		return -1;
	d->jobs[j].live = 1;
	d->jobs[j].epoch = 1;
	if (dlshim_dsa_job_extend(d, j, items, n) < 0 || d->jobs[j].nds == 0) {
		if (d->jobs[j].nds == 0)
			job_free(&d->jobs[j]); /* no cell holds its bit: free at once */
		else
			dlshim_dsa_job_remove(d, j);
		return -1;
	}
	return j;
}

void dlshim_dsa_job_remove(struct dlshim_dsa *d, int j)
{
	if (!valid_job(d, j))
		return;
	struct djob *jb = &d->jobs[j];
	for (uint32_t k = 0; k < jb->qlen; k++)
		d->pending[jb->q[(jb->qhead + k) % jb->qcap]]--;
	/* Its bit stays in the cells until the next sweep; its memory too (the
	 * sweep frees it: freeing megabytes here would be the slow part). */
	jb->live = 0;
	jb->qlen = jb->rem = 0;
	m_set(&d->dead, j);
}

int dlshim_dsa_compact(struct dlshim_dsa *d)
{
	if (m_empty(d->dead))
		return 0;
	mask_t dead = d->dead;
	/* Every cell holding a dead bit merges into the cell without them:
	 * relabel when that one does not exist, else move the smaller side.
	 * Cells are listed first because merging edits the live list. */
	uint32_t nv = 0, *todo = malloc((d->nlive ? d->nlive : 1) * sizeof(uint32_t));
	if (todo == NULL)
		return -1;
	for (uint32_t i = 0; i < d->nlive; i++)
		if (!m_empty(m_and(d->cells[d->live[i]]->sig, dead)))
			todo[nv++] = d->live[i];
	for (uint32_t v = 0; v < nv; v++) {
		struct cell *c = d->cells[todo[v]];
		mask_t sig = m_andnot(c->sig, dead);
		struct cell *t;
		HASH_FIND(hh, d->by_sig, &sig, sizeof(sig), t);
		if (t == NULL) {
			HASH_DEL(d->by_sig, c);
			c->sig = sig;
			HASH_ADD(hh, d->by_sig, sig, sizeof(c->sig), c);
			continue;
		}
		struct cell *small = c->n <= t->n ? c : t, *big = small == c ? t : c;
		if (grow((void **)&big->it, &big->cap, big->n + small->n, sizeof(uint32_t)) < 0) {
			/* out of memory: the cells merged so far are consistent, the
			 * rest keep their dead bits and the jobs stay dead */
			free(todo);
			return -1;
		}
		for (uint32_t k = 0; k < small->n; k++)
			cell_append(d, big->id, small->it[k]);
		small->n = 0;
		cell_release(d, small);
		if (big == c) {
			HASH_DEL(d->by_sig, c);
			c->sig = sig;
			HASH_ADD(hh, d->by_sig, sig, sizeof(c->sig), c);
		}
	}
	free(todo);
	d->walked = 0;
	for (int j = 0; j < MAXJ; j++)
		if (m_has(dead, j)) {
			job_free(&d->jobs[j]);
			m_clr(&d->dead, j);
		}
	return 0;
}

/* ---- sampling ------------------------------------------------------------- */

/* A new epoch: the job needs its whole dataset again. */
static int refill(struct dlshim_dsa *d, int j)
{
	struct djob *jb = &d->jobs[j];
	d->stamp++;
	for (uint32_t i = 0; i < jb->nds; i++)
		if (item_add_job(d, jb->ds[i], j) < 0)
			return -1;
	jb->rem = jb->nds;
	jb->epoch++;
	return 0;
}

static int queue_reserve(struct djob *jb)
{
	if (jb->qlen < jb->qcap)
		return 0;
	uint32_t c = jb->qcap ? jb->qcap * 2 : 16;
	uint32_t *q = malloc(c * sizeof(uint32_t));
	if (q == NULL)
		return -1;
	for (uint32_t k = 0; k < jb->qlen; k++)
		q[k] = jb->q[(jb->qhead + k) % jb->qcap];
	free(jb->q);
	jb->q = q;
	jb->qcap = c;
	jb->qhead = 0;
	return 0;
}

/* The jobs of a round only ever leave from the front of their sorted
 * order, so every level's job set is a suffix order[f..n-1]. One pass gives
 * each cell the first f whose suffix it contains (cell->s) and buckets the
 * cells by it; a level's vertex is then the cells with f_prev < s <= f and
 * its size a difference of prefix sums, instead of a scan per level. */
static int bucket_cells(struct dlshim_dsa *d, const int *order, int n, uint64_t *cum)
{
	mask_t sm[MAXJ + 1];
	sm[n] = (mask_t){{0, 0}};
	for (int f = n - 1; f >= 0; f--) {
		sm[f] = sm[f + 1];
		m_set(&sm[f], order[f]);
	}
	if (grow((void **)&d->sorted, &d->sorted_cap, d->nlive, sizeof(uint32_t)))
		return -1;
	uint32_t cnt[MAXJ + 2] = {0};
	memset(cum, 0, (size_t)(n + 1) * sizeof(uint64_t));
	for (uint32_t i = 0; i < d->nlive; i++) {
		struct cell *c = d->cells[d->live[i]];
		int lo = 0, hi = n; /* smallest f with sig >= sm[f]; sm[n] always fits */
		while (lo < hi) {
			int mid = (lo + hi) / 2;
			if (m_sup(c->sig, sm[mid]))
				hi = mid;
			else
				lo = mid + 1;
		}
		c->s = (uint32_t)lo;
		cnt[lo + 1]++;
		cum[lo] += c->n;
	}
	for (int f = 1; f <= n; f++)
		cum[f] += cum[f - 1];
	for (int f = 1; f <= n + 1; f++)
		cnt[f] += cnt[f - 1];
	for (int f = 0; f <= n; f++)
		d->bstart[f] = cnt[f];
	d->bstart[n + 1] = d->nlive;
	for (uint32_t i = 0; i < d->nlive; i++) {
		struct cell *c = d->cells[d->live[i]];
		d->sorted[cnt[c->s]++] = c->id;
	}
	return 0;
}

/* The r-th item of the cells with lo < s <= hi that hold job j (any job when j < 0). */
static uint32_t nth_in_buckets(struct dlshim_dsa *d, int lo, int hi, int j, uint64_t r)
{
	for (uint32_t k = d->bstart[lo + 1]; k < d->bstart[hi + 1]; k++) {
		struct cell *c = d->cells[d->sorted[k]];
		if (j >= 0 && !m_has(c->sig, j))
			continue;
		if (r < c->n)
			return c->it[r];
		r -= c->n;
	}
	return NONE;
}

/* Job j alone, uniform over its remaining items outside the cells with
 * s <= f (w of them). Rejection from its dataset is O(1) while w is a fair
 * share of it; after a few misses the exact walk decides (both uniform). */
static uint32_t lone_draw(struct dlshim_dsa *d, int j, int f, int n, uint64_t w)
{
	const struct djob *jb = &d->jobs[j];
	for (int t = 0; t < 8; t++) {
		uint32_t it = jb->ds[below(d, jb->nds)];
		const struct cell *c = d->cells[d->cell_of[it]];
		if (m_has(c->sig, j) && (int)c->s > f)
			return it;
	}
	return nth_in_buckets(d, f, n, j, below(d, w));
}

/* Uniform over all of job j's remaining items, by rejection from its
 * dataset, else the exact walk over the cells holding j. */
static uint32_t alone_uniform(struct dlshim_dsa *d, int j)
{
	const struct djob *jb = &d->jobs[j];
	for (int t = 0; t < 8; t++) {
		uint32_t it = jb->ds[below(d, jb->nds)];
		if (m_has(d->cells[d->cell_of[it]]->sig, j))
			return it;
	}
	uint64_t r = below(d, jb->rem);
	for (uint32_t i = 0; i < d->nlive; i++) {
		const struct cell *c = d->cells[d->live[i]];
		if (!m_has(c->sig, j))
			continue;
		if (r < c->n)
			return c->it[r];
		r -= c->n;
	}
	return NONE;
}

uint32_t dlshim_dsa_round(struct dlshim_dsa *d, mask_t who, uint32_t *out)
{
	int order[MAXJ], n = 0;
	for (int j = 0; j < MAXJ; j++) {
		if (!m_has(who, j) || !d->jobs[j].live)
			continue;
		if (d->jobs[j].rem == 0 && refill(d, j) < 0)
			continue;
		if (queue_reserve(&d->jobs[j]) < 0)
			continue;
		/* insertion sort by remaining size: the chain needs n_1 <= n_2 <= ... */
		int k = n++;
		while (k > 0 && d->jobs[order[k - 1]].rem > d->jobs[j].rem) {
			order[k] = order[k - 1];
			k--;
		}
		order[k] = j;
	}
	struct {
		mask_t sel;
		uint32_t item;
	} pick[MAXJ];
	int npick = 0, first = 0, prev = -1; /* level job set: order[first..n-1] */
	uint64_t cum[MAXJ + 1];
	if (n == 1) {
		/* a job alone (partial sampling): no vertex to form */
		pick[0].sel = (mask_t){{0, 0}};
		m_set(&pick[0].sel, order[0]);
		pick[0].item = alone_uniform(d, order[0]);
		npick = first = 1;
	} else if (n == 0) {
		return 0;
	} else {
		/* Cells split only by dead jobs make every round walk more of
		 * them. Once the rounds have walked sweep_ratio times the cells
		 * (a sweep costs about that many cell visits), sweep: the extra
		 * walking never exceeds about what the sweep costs (ski rental). */
		if (!m_empty(d->dead) && d->sweep_ratio &&
		    (d->walked += d->nlive) >= (uint64_t)d->sweep_ratio * d->nlive)
			dlshim_dsa_compact(d);
		if (bucket_cells(d, order, n, cum) < 0)
			return 0;
	}
	uint64_t xprev = 0;
	while (first < n) {
		uint64_t x = cum[first], vert = x - xprev, nprev = vert;
		mask_t sel = {{0, 0}};
		int k = first;
		for (; k < n; k++) {
			uint64_t ni = d->jobs[order[k]].rem - xprev;
			/* J_first takes the vertex w.p. |I|/n_1, J_i follows w.p. n_{i-1}/n_i */
			if (below(d, ni) >= nprev)
				break;
			m_set(&sel, order[k]);
			nprev = ni;
		}
		uint32_t it;
		int level = first;
		if (k > first) {
			it = nth_in_buckets(d, prev, first, -1, below(d, vert));
			first = k;
		} else {
			/* nobody took the vertex: J_1 draws from its part outside it */
			int j1 = order[first++];
			m_set(&sel, j1);
			it = lone_draw(d, j1, level, n, d->jobs[j1].rem - x);
		}
		pick[npick].sel = sel;
		pick[npick++].item = it;
		prev = level;
		xprev = x;
	}
	/* Apply the draws only now: every level above saw the same cells. */
	uint32_t drawn = 0;
	for (int p = 0; p < npick; p++) {
		uint32_t it = pick[p].item;
		if (it == NONE || item_drop_jobs(d, it, pick[p].sel) < 0)
			continue; /* cannot happen with consistent counts; skip the draw */
		for (int j = 0; j < MAXJ; j++)
			if (m_has(pick[p].sel, j)) {
				struct djob *jb = &d->jobs[j];
				jb->rem--;
				jb->q[(jb->qhead + jb->qlen++) % jb->qcap] = it;
				d->pending[it]++;
				if (out)
					out[j] = it;
				drawn++;
			}
	}
	return drawn;
}

uint32_t dlshim_dsa_next(struct dlshim_dsa *d, int j, uint32_t depth)
{
	if (!valid_job(d, j))
		return NONE;
	struct djob *jb = &d->jobs[j];
	if (depth == 0)
		depth = 1;
	while (jb->qlen < depth) {
		mask_t who = {{0, 0}};
		m_set(&who, j);
		for (int i = 0; i < MAXJ; i++)
			if (i != j && d->jobs[i].live && d->jobs[i].qlen < d->window)
				m_set(&who, i);
		uint32_t before = jb->qlen;
		dlshim_dsa_round(d, who, NULL);
		if (jb->qlen == before)
			break; /* out of memory */
	}
	if (jb->qlen == 0)
		return NONE;
	uint32_t it = jb->q[jb->qhead];
	jb->qhead = (jb->qhead + 1) % jb->qcap;
	jb->qlen--;
	d->pending[it]--;
	return it;
}

uint32_t dlshim_dsa_peek(const struct dlshim_dsa *d, int j, uint32_t k)
{
	if (!valid_job(d, j) || k >= d->jobs[j].qlen)
		return NONE;
	const struct djob *jb = &d->jobs[j];
	return jb->q[(jb->qhead + k) % jb->qcap];
}

uint32_t dlshim_dsa_pending(const struct dlshim_dsa *d, uint32_t it)
{
	return it < d->nitems ? d->pending[it] : 0;
}

uint32_t dlshim_dsa_needed(const struct dlshim_dsa *d, uint32_t it)
{
	if (it >= d->nitems)
		return 0;
	mask_t s = m_andnot(d->cells[d->cell_of[it]]->sig, d->dead);
	return (uint32_t)(__builtin_popcountll(s.w[0]) + __builtin_popcountll(s.w[1])) + d->pending[it];
}

/* ---- invariants ------------------------------------------------------------ */

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); free(cnt); return -1; } while (0)

int dlshim_dsa_check(const struct dlshim_dsa *d, char *err, size_t errlen)
{
	uint32_t *cnt = calloc(d->nitems ? d->nitems : 1, sizeof(uint32_t));
	if (cnt == NULL)
		FAIL("out of memory");
	uint64_t total = 0;
	if (HASH_COUNT(d->by_sig) != d->nlive)
		FAIL("%u cells hashed, %u live", (unsigned)HASH_COUNT(d->by_sig), d->nlive);
	if (d->nlive + d->nfree != d->ncells)
		FAIL("%u live + %u free != %u cells", d->nlive, d->nfree, d->ncells);
	for (uint32_t i = 0; i < d->nlive; i++) {
		const struct cell *c = d->cells[d->live[i]], *h;
		if (c->live_pos != i || c->n == 0)
			FAIL("live cell %u: pos %u, %u items", c->id, c->live_pos, c->n);
		HASH_FIND(hh, d->by_sig, &c->sig, sizeof(c->sig), h);
		if (h != c)
			FAIL("cell %u not found by its signature", c->id);
		for (int j = 0; j < MAXJ; j++)
			if (m_has(c->sig, j) && !d->jobs[j].live && !m_has(d->dead, j))
				FAIL("cell %u names free slot %d", c->id, j);
		for (uint32_t k = 0; k < c->n; k++) {
			uint32_t it = c->it[k];
			if (it >= d->nitems || d->cell_of[it] != c->id || d->pos[it] != k)
				FAIL("cell %u slot %u: item %u misplaced", c->id, k, it);
		}
		total += c->n;
	}
	if (total != d->nitems)
		FAIL("cells hold %llu items, %u exist", (unsigned long long)total, d->nitems);
	for (int j = 0; j < MAXJ; j++) {
		const struct djob *jb = &d->jobs[j];
		if (!jb->live)
			continue;
		uint32_t rem = 0;
		for (uint32_t it = 0; it < d->nitems; it++)
			if (m_has(d->cells[d->cell_of[it]]->sig, j)) {
				rem++;
				if (it / 64 >= jb->inwords || !(jb->in[it / 64] >> (it % 64) & 1))
					FAIL("job %d: item %u remaining but not in its dataset", j, it);
			}
		if (rem != jb->rem)
			FAIL("job %d: %u items remaining, counted %u", j, rem, jb->rem);
		if (jb->rem > jb->nds)
			FAIL("job %d: %u remaining of %u", j, jb->rem, jb->nds);
		for (uint32_t k = 0; k < jb->qlen; k++)
			cnt[jb->q[(jb->qhead + k) % jb->qcap]]++;
	}
	for (uint32_t it = 0; it < d->nitems; it++)
		if (cnt[it] != d->pending[it])
			FAIL("item %u: pending %u, queued %u", it, d->pending[it], cnt[it]);
	free(cnt);
	return 0;
}
