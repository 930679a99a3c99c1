/* Eviction policies: intrusive bucket lists over private per-item arrays. */
#include <stdlib.h>
#include <string.h>

#include "evict.h"

#define NONE UINT32_MAX

static uint64_t rng_next(uint64_t *s)
{
	/* splitmix64: small, seedable, good enough to pick victims. */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

int evict_init(struct evictor *ev, enum dlshim_evict policy, uint64_t seed)
{
	memset(ev, 0, sizeof(*ev));
	ev->policy = policy;
	ev->rng = seed ^ 0x5eedULL;
	for (int b = 0; b < EVICT_BUCKETS; b++)
		ev->head[b] = ev->tail[b] = NONE;
	return 0;
}

void evict_free(struct evictor *ev)
{
	free(ev->prev);
	free(ev->next);
	free(ev->bucket_of);
	free(ev->arr);
	free(ev->pos);
	memset(ev, 0, sizeof(*ev));
}

static int grow(uint32_t **a, uint32_t old, uint32_t cap, int fill_none)
{
	uint32_t *n = realloc(*a, (size_t)cap * sizeof(uint32_t));
	if (n == NULL)
		return -1;
	if (fill_none)
		memset(n + old, 0xff, (size_t)(cap - old) * sizeof(uint32_t));
	*a = n;
	return 0;
}

int evict_reserve(struct evictor *ev, uint32_t cap)
{
	if (cap <= ev->cap)
		return 0;
	uint32_t c = ev->cap ? ev->cap : 1024;
	while (c < cap)
		c *= 2;
	if (grow(&ev->prev, ev->cap, c, 1) || grow(&ev->next, ev->cap, c, 1) ||
	    grow(&ev->bucket_of, ev->cap, c, 1) || grow(&ev->arr, ev->cap, c, 0) ||
	    grow(&ev->pos, ev->cap, c, 1))
		return -1;
	ev->cap = c;
	return 0;
}

static uint32_t bucket_for(const struct evictor *ev, uint32_t refcnt)
{
	if (ev->policy != DLSHIM_EVICT_REFCNT)
		return 0;
	return refcnt < EVICT_BUCKETS ? refcnt : EVICT_BUCKETS - 1;
}

static void list_push_front(struct evictor *ev, uint32_t b, uint32_t it)
{
	ev->prev[it] = NONE;
	ev->next[it] = ev->head[b];
	if (ev->head[b] != NONE)
		ev->prev[ev->head[b]] = it;
	else
		ev->tail[b] = it;
	ev->head[b] = it;
	ev->bucket_of[it] = b;
}

static void list_unlink(struct evictor *ev, uint32_t it)
{
	uint32_t b = ev->bucket_of[it];
	if (ev->prev[it] != NONE)
		ev->next[ev->prev[it]] = ev->next[it];
	else
		ev->head[b] = ev->next[it];
	if (ev->next[it] != NONE)
		ev->prev[ev->next[it]] = ev->prev[it];
	else
		ev->tail[b] = ev->prev[it];
	ev->prev[it] = ev->next[it] = NONE;
}

int evict_has(const struct evictor *ev, uint32_t item)
{
	return item < ev->cap && ev->bucket_of[item] != NONE;
}

void evict_add(struct evictor *ev, uint32_t item, uint32_t refcnt)
{
	if (item >= ev->cap || evict_has(ev, item))
		return;
	if (ev->policy == DLSHIM_EVICT_RANDOM) {
		ev->pos[item] = ev->n;
		ev->arr[ev->n++] = item;
		ev->bucket_of[item] = 0;
		return;
	}
	list_push_front(ev, bucket_for(ev, refcnt), item);
}

void evict_del(struct evictor *ev, uint32_t item)
{
	if (!evict_has(ev, item))
		return;
	if (ev->policy == DLSHIM_EVICT_RANDOM) {
		uint32_t p = ev->pos[item], last = ev->arr[--ev->n];
		ev->arr[p] = last;
		ev->pos[last] = p;
		ev->pos[item] = NONE;
		ev->bucket_of[item] = NONE;
		return;
	}
	list_unlink(ev, item);
	ev->bucket_of[item] = NONE;
}

void evict_touch(struct evictor *ev, uint32_t item)
{
	if (!evict_has(ev, item) || ev->policy == DLSHIM_EVICT_FIFO || ev->policy == DLSHIM_EVICT_RANDOM)
		return;
	uint32_t b = ev->bucket_of[item];
	list_unlink(ev, item);
	list_push_front(ev, b, item);
}

void evict_recount(struct evictor *ev, uint32_t item, uint32_t refcnt)
{
	if (ev->policy != DLSHIM_EVICT_REFCNT || !evict_has(ev, item))
		return;
	uint32_t b = bucket_for(ev, refcnt);
	if (b == ev->bucket_of[item])
		return;
	list_unlink(ev, item);
	list_push_front(ev, b, item);
}

uint32_t evict_victim(struct evictor *ev)
{
	if (ev->policy == DLSHIM_EVICT_RANDOM)
		return ev->n ? ev->arr[rng_next(&ev->rng) % ev->n] : NONE;
	if (ev->policy == DLSHIM_EVICT_FIFO && ev->skip) {
		for (uint32_t it = ev->tail[0]; it != NONE; it = ev->prev[it])
			if (!ev->skip(ev->skip_ctx, it))
				return it;
		return NONE;
	}
	for (int b = 0; b < EVICT_BUCKETS; b++)
		if (ev->tail[b] != NONE)
			return ev->tail[b];
	return NONE;
}
