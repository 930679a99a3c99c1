/* Layout of the shared-memory cache segment.
 *
 * The coordinator creates one segment (a memfd), formats it and passes its
 * descriptor to clients, which map it read-only. Everything in it is plain
 * data addressed by indices, never pointers, so it means the same in every
 * process (LMDB's discipline).
 *
 *   [header][slot table: nslots x struct dlshim_shm_slot][next: nblocks x u32]
 *   [index: nindex x struct dlshim_shm_index][data blocks]
 *
 * A cached item occupies one slot and a chain of fixed-size blocks linked
 * through next[]. Each slot carries a generation that works as a seqlock:
 * odd while the coordinator loads or frees the slot, even once its bytes are
 * published. A client remembers the generation it was given at open and
 * checks it before and after every copy, so a slot reused underneath it
 * (crashed peer, fork, coordinator restart) can never deliver wrong bytes.
 *
 * The index maps (dev, ino) to a slot so that a client can find a resident
 * file without asking the coordinator (the hit path costs no round trip).
 * It is written only by the coordinator and may be read torn: a client
 * trusts a slot only after checking the slot's own identity under its
 * generation.
 */
#ifndef DLSHIM_SHM_H
#define DLSHIM_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DLSHIM_SHM_MAGIC 0x31484353484d4c44ULL /* "DLMHSCH1" little-endian */
#define DLSHIM_SHM_VERSION 3u
#define DLSHIM_BLOCK_SIZE (16u * 1024u)
#define DLSHIM_NO_BLOCK UINT32_MAX

struct dlshim_shm_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;   /* sizeof(struct dlshim_shm_header) */
	uint32_t slot_size;     /* sizeof(struct dlshim_shm_slot) */
	uint32_t block_size;
	uint64_t nslots;
	uint64_t nblocks;
	uint64_t slots_off;
	uint64_t next_off;
	uint64_t data_off;
	uint64_t total_size;
	uint64_t segment_id;    /* random per segment: tells a restarted coordinator's segment apart */
	uint64_t nindex;        /* power of two */
	uint64_t index_off;
	/* Bumped by the coordinator before it hands out any row mapping of a
	 * new HDF5 redirect epoch (any job): a client's remembered mapping is
	 * current while this has not moved. */
	_Atomic uint64_t rows_epochs;
};

struct dlshim_shm_index {
	_Atomic uint64_t dev, ino;
	_Atomic uint32_t slot;
	_Atomic uint32_t used;  /* 0: empty (ends a probe) */
};

/* Where everything is in a segment with a data area of `data_bytes`. */
struct dlshim_shm_geometry {
	uint64_t nslots, nblocks, nindex;
	uint64_t slots_off, next_off, index_off, data_off, total;
};
void dlshim_shm_geometry(uint64_t data_bytes, struct dlshim_shm_geometry *g);

struct dlshim_shm_slot {
	_Atomic uint64_t gen;   /* odd: unstable; even: published */
	uint64_t size;          /* bytes of the item */
	uint32_t first_block;   /* head of the block chain */
	uint32_t nblocks;
	uint64_t dev, ino;      /* identity of the cached file (diagnostics) */
	int64_t mtime_ns;
	int64_t ctime_ns;
};

/* A validated view of a mapped segment. */
struct dlshim_shm_view {
	const uint8_t *base;
	size_t len;
	uint64_t nslots, nblocks;   /* copied at attach: the header could change later */
	const struct dlshim_shm_header *hdr;
	const struct dlshim_shm_slot *slots;
	const uint32_t *next;
	const struct dlshim_shm_index *index;
	uint64_t nindex;
	const uint8_t *data;
};

/* Where the last copy from a slot ended, so sequential reads do not walk the
 * block chain from its head each time. Zero-initialise before first use. */
struct dlshim_shm_cursor {
	uint64_t gen;           /* generation the cursor belongs to; 0 = unset */
	uint64_t block_start;   /* item offset of `block` */
	uint32_t block;
};

/* Check magic, version, struct sizes and bounds of a segment of `len`
 * bytes at `base`. Returns 0 and fills `v`, or -1 when it is not a segment
 * this build understands. */
int dlshim_shm_attach(const void *base, size_t len, struct dlshim_shm_view *v);

/* Size of a segment for a data area of at least `data_bytes`, and the
 * derived counts. */
size_t dlshim_shm_layout(uint64_t data_bytes, uint64_t *nslots, uint64_t *nblocks);

/* Find the published slot holding exactly this file version (identity,
 * size, mtime and ctime as fstat gives them) without asking the coordinator.
 * Returns the slot and sets *gen, or -1 (absent, changed, or being reused). */
long dlshim_shm_lookup(const struct dlshim_shm_view *v, uint64_t dev, uint64_t ino, uint64_t size, int64_t mtime_ns,
		       int64_t ctime_ns, uint64_t *gen);

/* The coordinator's count of row redirect epochs started (any job). */
static inline uint64_t dlshim_shm_rows_epochs(const struct dlshim_shm_view *v)
{
	return atomic_load_explicit(&v->hdr->rows_epochs, memory_order_acquire);
}

static inline uint64_t dlshim_shm_hash(uint64_t dev, uint64_t ino)
{
	uint64_t z = ino * 0x9e3779b97f4a7c15ULL ^ (dev + 0x632be59bd9b4e019ULL);
	z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
	return z ^ (z >> 29);
}

/* Copy up to `len` bytes at offset `off` of the item in `slot`, which must be
 * published with generation `gen`. Returns the bytes copied (0 at or past
 * the end of the item), or -1 when the slot no longer holds that generation
 * or its chain is inconsistent: the caller must then read the real file.
 * Never faults on a corrupted segment (every index is bounds-checked). */
ssize_t dlshim_shm_read(const struct dlshim_shm_view *v, uint32_t slot, uint64_t gen,
			uint64_t off, void *buf, size_t len, struct dlshim_shm_cursor *cur);

#endif
