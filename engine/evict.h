/* Eviction policies. A policy only *chooses* victims among the items the
 * engine declares evictable (resident and unpinned); the engine does the
 * freeing (Plasma's split). Items are dense ids; the policy keeps its own
 * per-item links in private arrays grown with evict_reserve().
 *
 * refcnt: buckets by the number of live jobs that still need the item this
 *         epoch; the lowest non-empty bucket gives the victim, least recently
 *         used first within it.
 * lru / fifo: one bucket; lru moves an item to the front on every touch.
 * random: uniform over the evictable items.
 */
#ifndef DLSHIM_EVICT_H
#define DLSHIM_EVICT_H

#include <stdint.h>

#include "dlshim/config.h"

#define EVICT_BUCKETS 65 /* refcnt 0..64 (DLSHIM_ENGINE_MAX_JOBS) */

struct evictor {
	enum dlshim_evict policy;
	uint32_t cap;
	uint32_t *prev, *next, *bucket_of; /* per item; bucket_of = UINT32_MAX when absent */
	uint32_t head[EVICT_BUCKETS], tail[EVICT_BUCKETS];
	uint32_t *arr, *pos, n;            /* random: evictable items and their positions */
	uint64_t rng;
	/* fifo: items stay listed while pinned; the victim walk skips those
	 * for which skip() is true. */
	int (*skip)(void *ctx, uint32_t item);
	void *skip_ctx;
};

int evict_init(struct evictor *ev, enum dlshim_evict policy, uint64_t seed);
void evict_free(struct evictor *ev);
/* Make room for item ids < cap. Returns 0 or -1 on allocation failure. */
int evict_reserve(struct evictor *ev, uint32_t cap);
void evict_add(struct evictor *ev, uint32_t item, uint32_t refcnt);
void evict_del(struct evictor *ev, uint32_t item);
int evict_has(const struct evictor *ev, uint32_t item);
void evict_touch(struct evictor *ev, uint32_t item);
void evict_recount(struct evictor *ev, uint32_t item, uint32_t refcnt);
/* The item to evict next, or DLSHIM_NO_ITEM_EV when none is evictable. */
uint32_t evict_victim(struct evictor *ev);

#define DLSHIM_NO_ITEM_EV UINT32_MAX

#endif
