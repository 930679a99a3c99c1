/* Shared-memory segment layout and the client-side validated copy. */
#include <string.h>

#include "dlshim/shm.h"

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

void dlshim_shm_geometry(uint64_t data_bytes, struct dlshim_shm_geometry *g)
{
	uint64_t nb = (data_bytes + DLSHIM_BLOCK_SIZE - 1) / DLSHIM_BLOCK_SIZE;
	if (nb == 0)
		nb = 1;
	if (nb > UINT32_MAX / 4)
		nb = UINT32_MAX / 4;
	/* Every item takes at least one block, so nblocks slots always suffice;
	 * the index is kept at most half full. */
	g->nblocks = g->nslots = nb;
	g->nindex = 1;
	while (g->nindex < 2 * nb)
		g->nindex <<= 1;
	g->slots_off = align_up(sizeof(struct dlshim_shm_header), 64);
	g->next_off = align_up(g->slots_off + nb * sizeof(struct dlshim_shm_slot), 64);
	g->index_off = align_up(g->next_off + nb * sizeof(uint32_t), 64);
	g->data_off = align_up(g->index_off + g->nindex * sizeof(struct dlshim_shm_index), 4096);
	g->total = g->data_off + nb * DLSHIM_BLOCK_SIZE;
}

size_t dlshim_shm_layout(uint64_t data_bytes, uint64_t *nslots, uint64_t *nblocks)
{
	struct dlshim_shm_geometry g;
	dlshim_shm_geometry(data_bytes, &g);
	*nslots = g.nslots;
	*nblocks = g.nblocks;
	return (size_t)g.total;
}

int dlshim_shm_attach(const void *base, size_t len, struct dlshim_shm_view *v)
{
	const struct dlshim_shm_header *h = base;
	if (base == NULL || len < sizeof(*h))
		return -1;
	if (h->magic != DLSHIM_SHM_MAGIC || h->version != DLSHIM_SHM_VERSION ||
	    h->header_size != sizeof(*h) || h->slot_size != sizeof(struct dlshim_shm_slot) ||
	    h->block_size != DLSHIM_BLOCK_SIZE || h->total_size != len)
		return -1;
	if (h->nblocks == 0 || h->nblocks >= UINT32_MAX || h->nslots == 0 || h->nslots >= UINT32_MAX)
		return -1;
	/* Bounds of every region, with overflow-safe arithmetic. */
	uint64_t end;
	if (__builtin_mul_overflow(h->nslots, (uint64_t)sizeof(struct dlshim_shm_slot), &end) ||
	    __builtin_add_overflow(end, h->slots_off, &end) || end > len)
		return -1;
	if (__builtin_mul_overflow(h->nblocks, (uint64_t)sizeof(uint32_t), &end) ||
	    __builtin_add_overflow(end, h->next_off, &end) || end > len)
		return -1;
	if (__builtin_mul_overflow(h->nblocks, (uint64_t)DLSHIM_BLOCK_SIZE, &end) ||
	    __builtin_add_overflow(end, h->data_off, &end) || end > len)
		return -1;
	if (h->nindex == 0 || (h->nindex & (h->nindex - 1)) ||
	    __builtin_mul_overflow(h->nindex, (uint64_t)sizeof(struct dlshim_shm_index), &end) ||
	    __builtin_add_overflow(end, h->index_off, &end) || end > len)
		return -1;
	if (h->slots_off % 8 || h->next_off % 4 || h->index_off % 8)
		return -1;
	v->base = base;
	v->len = len;
	v->nslots = h->nslots;
	v->nblocks = h->nblocks;
	v->hdr = h;
	v->slots = (const struct dlshim_shm_slot *)((const uint8_t *)base + h->slots_off);
	v->next = (const uint32_t *)((const uint8_t *)base + h->next_off);
	v->index = (const struct dlshim_shm_index *)((const uint8_t *)base + h->index_off);
	v->nindex = h->nindex;
	v->data = (const uint8_t *)base + h->data_off;
	return 0;
}

long dlshim_shm_lookup(const struct dlshim_shm_view *v, uint64_t dev, uint64_t ino, uint64_t size, int64_t mtime_ns,
		       int64_t ctime_ns, uint64_t *gen)
{
	if (v->hdr == NULL || v->nindex == 0)
		return -1;
	uint64_t mask = v->nindex - 1, h = dlshim_shm_hash(dev, ino);
	for (uint64_t k = 0; k <= mask && k < 64; k++) {
		const struct dlshim_shm_index *e = &v->index[(h + k) & mask];
		if (!atomic_load_explicit(&e->used, memory_order_acquire))
			return -1;
		if (atomic_load_explicit(&e->dev, memory_order_relaxed) != dev ||
		    atomic_load_explicit(&e->ino, memory_order_relaxed) != ino)
			continue;
		uint32_t s = atomic_load_explicit(&e->slot, memory_order_relaxed);
		if (s >= v->nslots)
			return -1;
		/* The entry may be stale or torn: the slot's own identity, read
		 * under its generation, decides. */
		const struct dlshim_shm_slot *sl = &v->slots[s];
		uint64_t g1 = atomic_load_explicit(&sl->gen, memory_order_acquire);
		if (g1 & 1)
			return -1;
		int same = sl->dev == dev && sl->ino == ino && sl->size == size && sl->mtime_ns == mtime_ns &&
			   sl->ctime_ns == ctime_ns;
		atomic_thread_fence(memory_order_acquire);
		if (!same || atomic_load_explicit(&sl->gen, memory_order_relaxed) != g1)
			return -1;
		*gen = g1;
		return s;
	}
	return -1;
}

ssize_t dlshim_shm_read(const struct dlshim_shm_view *v, uint32_t slot, uint64_t gen, uint64_t off,
			void *buf, size_t len, struct dlshim_shm_cursor *cur)
{
	if (v->hdr == NULL || slot >= v->nslots || (gen & 1))
		return -1;
	const struct dlshim_shm_slot *s = &v->slots[slot];
	if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen)
		return -1;
	uint64_t size = s->size;
	uint32_t nblocks = (uint32_t)v->nblocks;
	if (off >= size || len == 0)
		goto validate_empty;
	if (len > size - off)
		len = (size_t)(size - off);

	/* Find the block holding `off`: resume from the cursor when it is at or
	 * before `off` in the same generation, else walk from the head. */
	uint32_t blk;
	uint64_t bstart;
	if (cur && cur->gen == gen && cur->block_start <= off) {
		blk = cur->block;
		bstart = cur->block_start;
	} else {
		blk = s->first_block;
		bstart = 0;
	}
	uint32_t steps = 0;
	while (off - bstart >= DLSHIM_BLOCK_SIZE) {
		if (blk >= nblocks || ++steps > nblocks)
			return -1;
		blk = v->next[blk];
		bstart += DLSHIM_BLOCK_SIZE;
	}
	uint8_t *dst = buf;
	size_t done = 0;
	while (done < len) {
		if (blk >= nblocks)
			return -1;
		uint64_t in = (off + done) - bstart;
		size_t n = DLSHIM_BLOCK_SIZE - (size_t)in;
		if (n > len - done)
			n = len - done;
		memcpy(dst + done, v->data + (uint64_t)blk * DLSHIM_BLOCK_SIZE + in, n);
		done += n;
		if (in + n == DLSHIM_BLOCK_SIZE && done < len) {
			if (++steps > nblocks)
				return -1;
			blk = v->next[blk];
			bstart += DLSHIM_BLOCK_SIZE;
		}
	}
	/* Seqlock check: the bytes count only if the slot kept its generation. */
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->gen, memory_order_relaxed) != gen)
		return -1;
	if (cur) {
		cur->gen = gen;
		cur->block = blk;
		cur->block_start = bstart;
	}
	return (ssize_t)done;

validate_empty:
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->gen, memory_order_relaxed) != gen)
		return -1;
	return 0;
}
