/* How far a job's served order is from an independent shuffle.
 *
 * Redirection changes which file a request gets, so a user needs to see what
 * it did to the order a model trains on. Per job epoch the engine keeps the
 * sequence of (requested, served) items and, when the epoch ends, measures:
 *
 *   displacement  mean |served position - position where that file was
 *                 requested| / n: 0 in exact mode, about 1/3 when the served
 *                 order is independent of the requested one;
 *   locality      share of consecutive files served from one label group that
 *                 come from the same physical chunk (the chunk sampler's
 *                 footprint), next to what an independent shuffle would give;
 *   pair_repeat   share of those consecutive pairs that were also neighbours
 *                 in the previous epoch (files that travel together epoch after
 *                 epoch), next to the shuffle's value;
 *   class_mix     distinct directories (classes) per window of 32 consecutive
 *                 files over the expectation for a shuffle of the same files:
 *                 1 means batches are as mixed as a shuffle's.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MIX_WINDOW 32

void order_note(struct order_track *t, uint32_t req, uint32_t served)
{
	if (t->n == t->cap) {
		/* Statistics only: a failed allocation drops the sample. */
		uint32_t nc = t->cap ? t->cap * 2 : 256;
		uint32_t *r = realloc(t->req, (size_t)nc * sizeof(*r));
		if (r)
			t->req = r;
		uint32_t *s = r ? realloc(t->srv, (size_t)nc * sizeof(*s)) : NULL;
		if (s)
			t->srv = s;
		if (!r || !s || nc < t->cap)
			return;
		t->cap = nc;
	}
	t->req[t->n] = req;
	t->srv[t->n] = served;
	t->n++;
}

void order_free(struct order_track *t)
{
	free(t->req);
	free(t->srv);
	free(t->prev_next);
	memset(t, 0, sizeof(*t));
}

static uint32_t dir_hash(const char *path)
{
	if (!path)
		return 0;
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)path[i]) * 16777619u;
	return h;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

/* Distinct classes per window of MIX_WINDOW over the shuffle's expectation:
 * E = sum over classes c of 1 - C(n - n_c, w) / C(n, w). */
static float class_mix(const uint32_t *cls, uint32_t n)
{
	if (n < 2 * MIX_WINDOW)
		return 0;
	double seen = 0;
	uint32_t windows = n / MIX_WINDOW;
	for (uint32_t w = 0; w < windows; w++) {
		const uint32_t *c = cls + (size_t)w * MIX_WINDOW;
		for (uint32_t i = 0; i < MIX_WINDOW; i++) {
			uint32_t j = 0;
			while (j < i && c[j] != c[i])
				j++;
			seen += j == i;
		}
	}
	seen /= windows;
	uint32_t *sorted = malloc((size_t)n * sizeof(*sorted));
	if (!sorted)
		return 0;
	memcpy(sorted, cls, (size_t)n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_u32);
	double expect = 0;
	for (uint32_t i = 0; i < n;) {
		uint32_t j = i;
		while (j < n && sorted[j] == sorted[i])
			j++;
		double miss = 1; /* P(a window holds none of this class) */
		for (uint32_t k = 0; k < MIX_WINDOW && miss > 0; k++)
			miss *= (double)(n - (j - i) - k) / (double)(n - k);
		expect += 1 - (miss > 0 ? miss : 0);
		i = j;
	}
	free(sorted);
	return expect > 0 ? (float)(seen / expect) : 0;
}

int order_epoch_end(struct dlshim_engine *e, struct job *jb, struct dlshim_order_stats *out)
{
	struct order_track *t = &jb->order;
	memset(out, 0, sizeof(*out));
	uint32_t n = t->n, kind = GKIND(jb);
	t->n = 0;
	if (n == 0)
		return -1;
	uint32_t *pos = malloc((size_t)e->nitems * sizeof(*pos));
	uint32_t *next = malloc((size_t)e->nitems * sizeof(*next));
	uint32_t *last = malloc((size_t)(e->ngroups ? e->ngroups : 1) * sizeof(*last));
	uint32_t *cls = malloc((size_t)n * sizeof(*cls));
	if (!pos || !next || !last || !cls) {
		free(pos), free(next), free(last), free(cls);
		return -1;
	}
	memset(pos, 0xff, (size_t)e->nitems * sizeof(*pos));
	memset(next, 0xff, (size_t)e->nitems * sizeof(*next));
	memset(last, 0xff, (size_t)(e->ngroups ? e->ngroups : 1) * sizeof(*last));
	for (uint32_t k = n; k-- > 0;)
		if (t->req[k] < e->nitems)
			pos[t->req[k]] = k; /* first time each file was asked for */

	double disp = 0;
	uint32_t ndisp = 0;
	double pairs = 0, same_chunk = 0, same_chunk_shuffle = 0, repeats = 0, repeats_shuffle = 0;
	int have_prev = t->prev_next != NULL && t->prev_items == e->nitems;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t s = t->srv[k];
		cls[k] = s < e->nitems ? dir_hash(e->items[s].path) : 0;
		if (s >= e->nitems)
			continue;
		if (pos[s] != NONE) {
			disp += (double)(k > pos[s] ? k - pos[s] : pos[s] - k);
			ndisp++;
		}
		uint32_t g = e->items[s].group[kind];
		if (g == NONE || g >= e->ngroups)
			continue;
		uint32_t a = last[g];
		last[g] = s;
		if (a == NONE)
			continue;
		const struct group *gr = e->groups[g];
		pairs++;
		same_chunk += e->items[a].chunk[kind] == e->items[s].chunk[kind];
		/* A shuffle puts two distinct members in one chunk with probability
		 * sum c(c-1) / (n(n-1)) over the group's chunk sizes c. */
		if (gr->n > 1 && gr->k > 0) {
			double full = gr->n / gr->k, rest = gr->n % gr->k;
			same_chunk_shuffle += (full * gr->k * (gr->k - 1.0) + rest * (rest - 1)) /
					      ((double)gr->n * (gr->n - 1.0));
		}
		next[a] = s;
		if (have_prev) {
			repeats += t->prev_next[a] == s || t->prev_next[s] == a;
			repeats_shuffle += gr->n > 1 ? 2.0 / gr->n : 0;
		}
	}
	out->n = n;
	out->displacement = ndisp ? (float)(disp / ndisp / n) : 0;
	if (pairs > 0) {
		out->locality = (float)(same_chunk / pairs);
		out->locality_shuffle = (float)(same_chunk_shuffle / pairs);
		if (have_prev) {
			out->pair_repeat = (float)(repeats / pairs);
			out->pair_repeat_shuffle = (float)(repeats_shuffle / pairs);
			out->has_prev = 1;
		}
	}
	out->class_mix = class_mix(cls, n);
	free(t->prev_next);
	t->prev_next = next;
	t->prev_items = e->nitems;
	free(pos), free(last), free(cls);
	return 0;
}
