/* Unit tests for the shared segment layout and the client-side validated
 * copy (include/dlshim/shm.h), on a segment formatted by the engine over a
 * private aligned buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlshim/engine.h"
#include "dlshim/shm.h"

#define BS DLSHIM_BLOCK_SIZE
#define MIB (1024u * 1024u)

struct fx {
	uint8_t *mem;
	size_t len;
	struct dlshim_engine *e;
	struct dlshim_shm_view v;
	int job;
};

static uint8_t pat(uint64_t ino, int64_t mtime, uint64_t off)
{
	uint64_t z = off * 0x9e3779b97f4a7c15ULL + ino * 0x100000001b3ULL + (uint64_t)mtime;
	return (uint8_t)(z >> 56 ^ z >> 13 ^ off);
}

static struct fx *fx_new(size_t len, enum dlshim_evict pol)
{
	struct fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->len = len;
	f->mem = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	assert_non_null(f->mem);
	memset(f->mem, 0xa5, len); /* garbage: the engine must format what it uses */
	struct dlshim_engine_opts o = {.shm_base = f->mem, .shm_len = len, .evict = pol, .seed = 1};
	f->e = dlshim_engine_create(&o);
	assert_non_null(f->e);
	assert_int_equal(dlshim_shm_attach(f->mem, len, &f->v), 0);
	f->job = dlshim_engine_job_attach(f->e, "shm");
	assert_true(f->job >= 0);
	return f;
}

static void fx_free(struct fx *f)
{
	if (f == NULL)
		return;
	dlshim_engine_destroy(f->e);
	free(f->mem);
	free(f);
}

static int setup(void **state)
{
	*state = fx_new(MIB, DLSHIM_EVICT_LRU);
	return 0;
}

static int teardown(void **state)
{
	fx_free(*state);
	return 0;
}

static struct dlshim_file_id fid(uint64_t ino, uint64_t size, int64_t mtime)
{
	struct dlshim_file_id id = {.dev = 1, .ino = ino, .size = size, .mtime_ns = mtime};
	return id;
}

/* Write the file's pattern into a loading slot through slot_iov (3 iovecs at a time). */
static void fill(struct fx *f, uint32_t slot, const struct dlshim_file_id *id)
{
	uint64_t off = 0;
	while (off < id->size) {
		struct iovec iov[3];
		int n = dlshim_engine_slot_iov(f->e, slot, off, iov, 3);
		assert_true(n > 0 && n <= 3);
		for (int i = 0; i < n; i++) {
			uint8_t *p = iov[i].iov_base;
			assert_true(p >= f->mem + f->v.hdr->data_off && p + iov[i].iov_len <= f->mem + f->len);
			for (size_t k = 0; k < iov[i].iov_len; k++)
				p[k] = pat(id->ino, id->mtime_ns, off + k);
			off += iov[i].iov_len;
		}
	}
	assert_int_equal(off, id->size);
	struct iovec iov[1];
	assert_int_equal(dlshim_engine_slot_iov(f->e, slot, id->size, iov, 1), 0);
}

/* Open (expect LOAD), fill, publish. The pin stays held. Returns the gen. */
static uint64_t load(struct fx *f, const struct dlshim_file_id *id, uint32_t *slot)
{
	struct dlshim_open_result r;
	dlshim_engine_open(f->e, f->job, id, 0, &r);
	assert_int_equal(r.kind, DLSHIM_OPEN_LOAD);
	fill(f, r.slot, id);
	uint64_t g = dlshim_engine_load_done(f->e, f->job, r.item, 1);
	assert_true(g != 0 && (g & 1) == 0);
	*slot = r.slot;
	return g;
}

/* Read [off, off+len) and compare with the file's pattern. */
static void check_read(struct fx *f, uint32_t slot, uint64_t gen, const struct dlshim_file_id *id,
		       uint64_t off, size_t len, struct dlshim_shm_cursor *cur, uint8_t *buf)
{
	uint64_t want = off >= id->size ? 0 : (len < id->size - off ? len : id->size - off);
	memset(buf, 0x5a, len + 1);
	ssize_t n = dlshim_shm_read(&f->v, slot, gen, off, buf, len, cur);
	assert_int_equal(n, (ssize_t)want);
	for (uint64_t k = 0; k < want; k++)
		if (buf[k] != pat(id->ino, id->mtime_ns, off + k))
			fail_msg("ino %llu off %llu len %zu: byte %llu differs", (unsigned long long)id->ino,
				 (unsigned long long)off, len, (unsigned long long)k);
	assert_int_equal(buf[want], 0x5a); /* nothing written past the count */
}

static uint64_t up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* layout: block and slot counts, region alignment and total size for edge sizes. */
static void test_layout_sizes(void **state)
{
	(void)state;
	struct {
		uint64_t data, nb;
	} cases[] = {{0, 1}, {1, 1}, {BS - 1, 1}, {BS, 1}, {BS + 1, 2}, {100000, 7}, {MIB, 64}};
	size_t prev = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t ns = 0, nb = 0;
		size_t sz = dlshim_shm_layout(cases[i].data, &ns, &nb);
		assert_int_equal(nb, cases[i].nb);
		assert_int_equal(ns, nb);
		uint64_t off = up(sizeof(struct dlshim_shm_header), 64) + ns * sizeof(struct dlshim_shm_slot);
		off = up(off, 64) + nb * 4;
		uint64_t nidx = 1;
		while (nidx < 2 * nb)
			nidx <<= 1;
		off = up(off, 64) + nidx * sizeof(struct dlshim_shm_index);
		off = up(off, 4096) + nb * BS;
		assert_int_equal(sz, off);
		assert_int_equal(sz % 4096, 0);
		assert_true(sz >= cases[i].data);
		if (cases[i].data >= BS)
			assert_true(sz >= prev);
		prev = sz;
	}
	assert_int_equal(sizeof(struct dlshim_shm_slot) % 8, 0);
	/* A huge request clamps the block count well below the NO_BLOCK
	 * sentinel (the index, twice as large, must stay addressable). */
	uint64_t ns, nb;
	(void)dlshim_shm_layout(UINT64_MAX / 2, &ns, &nb);
	assert_int_equal(nb, (uint64_t)UINT32_MAX / 4);
}

/* attach: accepts engine-formatted segments of several lengths; view points at the regions. */
static void test_attach_accepts_engine_segments(void **state)
{
	(void)state;
	size_t lens[] = {64 * 1024 + 8192, MIB, MIB + 12345, 2 * MIB, 3 * MIB + 1};
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		struct fx *f = fx_new(lens[i], DLSHIM_EVICT_REFCNT);
		const struct dlshim_shm_header *h = (const void *)f->mem;
		assert_int_equal(h->magic, DLSHIM_SHM_MAGIC);
		assert_int_equal(h->total_size, lens[i]);
		assert_ptr_equal(f->v.hdr, h);
		assert_ptr_equal(f->v.base, f->mem);
		assert_int_equal(f->v.len, lens[i]);
		assert_ptr_equal(f->v.slots, f->mem + h->slots_off);
		assert_ptr_equal(f->v.next, f->mem + h->next_off);
		assert_ptr_equal(f->v.data, f->mem + h->data_off);
		assert_true(h->data_off + h->nblocks * BS <= lens[i]);
		assert_int_equal(h->data_off % 4096, 0);
		struct dlshim_cache_stats cs;
		dlshim_engine_cache_stats(f->e, &cs);
		assert_int_equal(cs.capacity_bytes, h->nblocks * BS);
		/* Every slot starts unpublished. */
		for (uint64_t s = 0; s < h->nslots; s++)
			assert_int_equal(f->v.slots[s].gen & 1, 1);
		fx_free(f);
	}
	/* 1 MiB: 64 blocks do not fit beside the tables, 63 do. */
	struct fx *f = fx_new(MIB, DLSHIM_EVICT_LRU);
	assert_int_equal(f->v.hdr->nblocks, 63);
	fx_free(f);
}

/* create: a segment of exactly dlshim_shm_layout(k blocks) bytes holds k
 * blocks (the largest data area that fits); one byte less holds k-1; a
 * segment too small for one block gives no engine. */
static void test_create_exact_layout(void **state)
{
	(void)state;
	uint8_t *mem = aligned_alloc(4096, 256 * 1024);
	assert_non_null(mem);
	char why[256] = "";
	for (uint64_t k = 1; k <= 8; k++) {
		uint64_t ns, nb;
		size_t len = dlshim_shm_layout(k * BS, &ns, &nb);
		assert_true(len <= 256 * 1024);
		struct dlshim_engine_opts o = {.shm_base = mem, .shm_len = len, .evict = DLSHIM_EVICT_LRU};
		struct dlshim_engine *e = dlshim_engine_create(&o);
		uint64_t got = e ? ((struct dlshim_shm_header *)mem)->nblocks : 0;
		if (got != k && why[0] == 0)
			snprintf(why, sizeof(why), "len %zu = layout(%llu blocks): engine %s with %llu blocks", len,
				 (unsigned long long)k, e ? "created" : "NULL", (unsigned long long)got);
		dlshim_engine_destroy(e);
		if (k > 1) {
			o.shm_len = len - 1;
			e = dlshim_engine_create(&o);
			assert_non_null(e);
			assert_int_equal(((struct dlshim_shm_header *)mem)->nblocks, k - 1);
			dlshim_engine_destroy(e);
		}
	}
	struct dlshim_engine_opts o = {.shm_base = mem, .shm_len = 8192};
	assert_null(dlshim_engine_create(&o));
	o.shm_len = 0;
	assert_null(dlshim_engine_create(&o));
	free(mem);
	if (why[0])
		fail_msg("%s", why);
}

/* attach: rejects bad magic/version/sizes/length/offsets/counts, NULL and short buffers. */
static void test_attach_rejects(void **state)
{
	struct fx *f = *state;
	struct dlshim_shm_header *h = (void *)f->mem;
	struct dlshim_shm_header save = *h;
	struct dlshim_shm_view v;
	memset(&v, 0, sizeof(v));
	assert_int_equal(dlshim_shm_attach(f->mem, f->len, &v), 0);
	assert_int_equal(dlshim_shm_attach(NULL, f->len, &v), -1);
	assert_int_equal(dlshim_shm_attach(f->mem, sizeof(*h) - 1, &v), -1);
	assert_int_equal(dlshim_shm_attach(f->mem, f->len - 1, &v), -1); /* len mismatch */
	assert_int_equal(dlshim_shm_attach(f->mem, f->len + 4096, &v), -1);

#define REJECT(stmt)                                                        \
	do {                                                                \
		*h = save;                                                  \
		stmt;                                                       \
		assert_int_equal(dlshim_shm_attach(f->mem, f->len, &v), -1); \
	} while (0)
	REJECT(h->magic ^= 1);
	REJECT(h->version = DLSHIM_SHM_VERSION + 1);
	REJECT(h->version = 0);
	REJECT(h->header_size = sizeof(*h) + 8);
	REJECT(h->slot_size = sizeof(struct dlshim_shm_slot) - 8);
	REJECT(h->block_size = BS * 2);
	REJECT(h->total_size = f->len + 1);
	REJECT(h->nblocks = 0);
	REJECT(h->nslots = 0);
	REJECT(h->nblocks = UINT32_MAX);
	REJECT(h->nblocks = 1ULL << 40);
	REJECT(h->nblocks = UINT64_MAX / 2);
	REJECT(h->nslots = UINT32_MAX);
	REJECT(h->nslots = 1ULL << 60);
	REJECT(h->nblocks = save.nblocks + 1);            /* data region past the end */
	REJECT(h->nslots = f->len / sizeof(struct dlshim_shm_slot)); /* slot table past the end */
	REJECT(h->slots_off = f->len);
	REJECT(h->slots_off = UINT64_MAX - 8);            /* overflow */
	REJECT(h->next_off = f->len - 4);
	REJECT(h->next_off = UINT64_MAX - 3);
	REJECT(h->data_off = f->len - save.nblocks * BS + 4096); /* data region past the end */
	REJECT(h->data_off = UINT64_MAX - 4095);
	REJECT(h->slots_off = save.slots_off + 4);        /* misaligned slot table */
	REJECT(h->next_off = save.next_off + 2);          /* misaligned next[] */
#undef REJECT
	*h = save;
	assert_int_equal(dlshim_shm_attach(f->mem, f->len, &v), 0);
}

/* read: files of size 0, 1, 16384, 16385 and 100000 read back exactly at every
 * offset near block boundaries and on a stride, for lengths from 0 to past EOF. */
static void test_read_roundtrip(void **state)
{
	struct fx *f = *state;
	uint64_t sizes[] = {0, 1, BS, BS + 1, 100000};
	enum { N = 5 };
	uint32_t slot[N];
	uint64_t gen[N];
	struct dlshim_file_id id[N];
	for (int i = 0; i < N; i++) {
		id[i] = fid(10 + (uint64_t)i, sizes[i], 77);
		gen[i] = load(f, &id[i], &slot[i]);
		assert_int_equal(f->v.slots[slot[i]].size, sizes[i]);
	}
	uint8_t *buf = malloc(200000);
	assert_non_null(buf);
	size_t lens[] = {0, 1, 2, 3, 100, BS - 1, BS, BS + 1, 2 * BS + 5, 99999, 100000, 150000};
	for (int i = 0; i < N; i++) {
		uint64_t sz = sizes[i];
		for (uint64_t off = 0; off <= sz + 2; off++) {
			uint64_t in = off % BS;
			int near = in < 3 || in > BS - 4 || off + 3 > sz;
			if (sz > 2 * BS && !near && off % 997 != 0)
				continue;
			for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
				if (lens[l] > 3 && !near && off % (997 * 7) != 0)
					continue;
				check_read(f, slot[i], gen[i], &id[i], off, lens[l], NULL, buf);
			}
		}
		/* Far past EOF and the largest offset. */
		check_read(f, slot[i], gen[i], &id[i], sz + BS * 10, 10, NULL, buf);
		check_read(f, slot[i], gen[i], &id[i], UINT64_MAX, 10, NULL, buf);
	}
	/* Every offset of the 16385-byte file with small lengths, crossing the boundary. */
	for (uint64_t off = 0; off <= BS + 1; off++)
		check_read(f, slot[3], gen[3], &id[3], off, 2, NULL, buf);
	free(buf);
}

/* read: sequential reads through one cursor give the same bytes as cursor-less
 * reads, for several chunk sizes; seeking backwards with a cursor stays correct. */
static void test_read_cursor(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id id = fid(5, 100000, 3);
	uint32_t s;
	uint64_t g = load(f, &id, &s);
	uint8_t *a = malloc(id.size + 64), *b = malloc(id.size + 64);
	assert_non_null(a);
	assert_non_null(b);
	size_t chunks[] = {1, 7, 1000, BS - 1, BS, BS + 1, 30000, 100000};
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		struct dlshim_shm_cursor cur;
		memset(&cur, 0, sizeof(cur));
		memset(a, 0, id.size);
		memset(b, 1, id.size);
		uint64_t off = 0;
		while (off < id.size) {
			ssize_t n1 = dlshim_shm_read(&f->v, s, g, off, a + off, chunks[c], &cur);
			ssize_t n2 = dlshim_shm_read(&f->v, s, g, off, b + off, chunks[c], NULL);
			assert_true(n1 > 0);
			assert_int_equal(n1, n2);
			assert_int_equal(cur.gen, g);
			assert_true(cur.block_start <= off + (uint64_t)n1);
			off += (uint64_t)n1;
		}
		assert_int_equal(off, id.size);
		assert_memory_equal(a, b, id.size);
		for (uint64_t k = 0; k < id.size; k++)
			if (a[k] != pat(id.ino, id.mtime_ns, k))
				fail_msg("chunk %zu byte %llu", chunks[c], (unsigned long long)k);
		/* EOF through the cursor. */
		assert_int_equal(dlshim_shm_read(&f->v, s, g, id.size, a, 10, &cur), 0);
		/* Backwards and forwards with the same cursor. */
		uint64_t offs[] = {50000, 3, 99990, 16384, 16383, 0, 65536};
		for (size_t k = 0; k < sizeof(offs) / sizeof(offs[0]); k++)
			check_read(f, s, g, &id, offs[k], 20000, &cur, a);
	}
	/* A cursor of another generation is ignored. */
	struct dlshim_shm_cursor cur = {.gen = g + 2, .block_start = 0, .block = UINT32_MAX};
	check_read(f, s, g, &id, 40000, 100, &cur, a);
	assert_int_equal(cur.gen, g);
	free(a);
	free(b);
}

/* read: odd, wrong, unpublished and out-of-range generations/slots return -1. */
static void test_read_bad_gen(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id id = fid(1, 5000, 1);
	uint32_t s;
	uint64_t g = load(f, &id, &s);
	uint8_t buf[64];
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 0, buf, 10, NULL), 10);
	assert_int_equal(dlshim_shm_read(&f->v, s, g + 1, 0, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, s, g - 1, 0, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, s, g + 2, 0, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, s, 0, 0, buf, 10, NULL), -1);
	/* Zero-length and past-EOF reads validate the generation too. */
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 0, buf, 0, NULL), 0);
	assert_int_equal(dlshim_shm_read(&f->v, s, g + 2, 0, buf, 0, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, s, g + 2, 6000, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, (uint32_t)f->v.hdr->nslots, g, 0, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, UINT32_MAX, g, 0, buf, 10, NULL), -1);
	/* A slot still loading is odd: every even gen fails. */
	struct dlshim_file_id id2 = fid(2, 100, 1);
	struct dlshim_open_result r;
	dlshim_engine_open(f->e, f->job, &id2, 0, &r);
	assert_int_equal(r.kind, DLSHIM_OPEN_LOAD);
	uint64_t lg = atomic_load(&f->v.slots[r.slot].gen);
	assert_int_equal(lg & 1, 1);
	assert_int_equal(dlshim_shm_read(&f->v, r.slot, lg, 0, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, r.slot, lg + 1, 0, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, r.slot, lg - 1, 0, buf, 10, NULL), -1);
	/* A view that never attached fails cleanly. */
	struct dlshim_shm_view none;
	memset(&none, 0, sizeof(none));
	assert_int_equal(dlshim_shm_read(&none, 0, 2, 0, buf, 10, NULL), -1);
}

/* read: after the item is evicted, and after its slot is reused by another
 * file, the old generation returns -1 (also through a cursor of that gen). */
static void test_read_stale_after_evict_and_reuse(void **state)
{
	struct fx *f = *state;
	uint64_t nb = f->v.hdr->nblocks;
	uint64_t per = 7; /* 100000 bytes = 7 blocks */
	uint64_t fit = nb / per;
	uint8_t *buf = malloc(100001);
	assert_non_null(buf);
	struct dlshim_file_id a = fid(1000, 100000, 1);
	uint32_t sa;
	uint64_t ga = load(f, &a, &sa);
	struct dlshim_shm_cursor cur;
	memset(&cur, 0, sizeof(cur));
	check_read(f, sa, ga, &a, 20000, 100, &cur, buf);
	assert_int_equal(dlshim_engine_release(f->e, f->job, sa, ga, 100, 0), 0);
	/* Still readable after release (unpinned but resident). */
	check_read(f, sa, ga, &a, 0, 100000, NULL, buf);
	/* Fill the rest, then one more: `a` (least recently released) goes. */
	for (uint64_t i = 1; i <= fit; i++) {
		struct dlshim_file_id x = fid(1000 + i, 100000, 1);
		uint32_t s;
		uint64_t g = load(f, &x, &s);
		assert_int_equal(dlshim_engine_release(f->e, f->job, s, g, 0, 0), 0);
	}
	assert_false(dlshim_engine_item_resident(f->e, dlshim_engine_find_item(f->e, 1, 1000)));
	assert_int_equal(dlshim_shm_read(&f->v, sa, ga, 0, buf, 100, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, sa, ga, 20000, buf, 100, &cur), -1);
	assert_int_equal(dlshim_shm_read(&f->v, sa, ga, 100000, buf, 100, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, sa, ga, 0, buf, 0, NULL), -1);
	/* Find the slot's current owner (slots are reused); old gen fails, new gen reads the new bytes. */
	uint64_t ng = atomic_load(&f->v.slots[sa].gen);
	if (ng != ga && !(ng & 1)) {
		assert_int_equal(dlshim_shm_read(&f->v, sa, ga, 0, buf, 100, &cur), -1);
		struct dlshim_file_id owner = fid(f->v.slots[sa].ino, f->v.slots[sa].size, 1);
		check_read(f, sa, ng, &owner, 0, 100000, NULL, buf);
		check_read(f, sa, ng, &owner, 20000, 100, &cur, buf);
	} else {
		/* Reuse explicitly: a new file lands in a free slot. */
		fail_msg("slot %u not reused (gen %llu)", sa, (unsigned long long)ng);
	}
	free(buf);
}

/* read: a corrupted chain (out-of-range next, bad head, huge size, cycles)
 * returns -1 or in-bounds bytes, never faults or overruns the buffer. */
static void test_read_corrupt_chain(void **state)
{
	struct fx *f = *state;
	struct dlshim_shm_header *h = (void *)f->mem;
	uint32_t *next = (uint32_t *)(f->mem + h->next_off);
	struct dlshim_shm_slot *slots = (struct dlshim_shm_slot *)(f->mem + h->slots_off);
	uint32_t nb = (uint32_t)h->nblocks;
	struct dlshim_file_id id = fid(9, 100000, 4);
	uint32_t s;
	uint64_t g = load(f, &id, &s);
	size_t big = (size_t)nb * BS * 3;
	uint8_t *buf = malloc(big + 1);
	assert_non_null(buf);
	uint32_t b0 = slots[s].first_block, b1 = next[b0], b2 = next[b1];
	assert_true(b0 < nb && b1 < nb && b2 < nb);

	/* next[] out of range: the first block still reads, anything past it fails. */
	next[b0] = nb;
	check_read(f, s, g, &id, 0, 100, NULL, buf);
	check_read(f, s, g, &id, 0, BS, NULL, buf);
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 0, buf, BS + 1, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, s, g, BS, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 90000, buf, 10, NULL), -1);
	next[b0] = UINT32_MAX - 1;
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 50000, buf, 10, NULL), -1);
	next[b0] = b1;
	check_read(f, s, g, &id, 0, 100000, NULL, buf);

	/* Head out of range. */
	slots[s].first_block = nb + 7;
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 0, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 40000, buf, 10, NULL), -1);
	slots[s].first_block = b0;

	/* Size larger than the chain: reading past its end fails. */
	slots[s].size = 1000000;
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 150000, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 0, buf, 200000, NULL), -1);

	/* A cycle with a huge size: the walk is bounded, both while seeking and while copying. */
	slots[s].size = UINT64_MAX / 2;
	next[b1] = b0;
	assert_int_equal(dlshim_shm_read(&f->v, s, g, (uint64_t)nb * BS * 2, buf, 10, NULL), -1);
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 0, buf, big, NULL), -1);
	struct dlshim_shm_cursor cur;
	memset(&cur, 0, sizeof(cur));
	ssize_t n = dlshim_shm_read(&f->v, s, g, 0, buf, 10, &cur);
	assert_int_equal(n, 10);
	assert_int_equal(dlshim_shm_read(&f->v, s, g, (uint64_t)nb * BS * 2, buf, 10, &cur), -1);
	/* Self-loop. */
	next[b0] = b0;
	assert_int_equal(dlshim_shm_read(&f->v, s, g, (uint64_t)(nb + 1) * BS + 5, buf, 10, NULL), -1);

	/* A short cycle within a plausible size cannot be told from data, but stays in bounds. */
	slots[s].size = id.size;
	n = dlshim_shm_read(&f->v, s, g, 0, buf, id.size, NULL);
	assert_true(n == -1 || n == (ssize_t)id.size);

	/* A corrupted cursor (block out of range) is caught too. */
	next[b0] = b1;
	next[b1] = b2;
	struct dlshim_shm_cursor bad = {.gen = g, .block_start = 0, .block = nb + 1};
	assert_int_equal(dlshim_shm_read(&f->v, s, g, 10, buf, 10, &bad), -1);
	free(buf);
}

/* read: the bounds a view was validated with hold even if the header is
 * rewritten after attach (the counts must not be re-read from shared memory). */
static void test_read_header_changed_after_attach(void **state)
{
	(void)state;
	/* The buffer is twice the segment, so an overrun reads our own memory, not a fault. */
	size_t len = MIB;
	uint8_t *mem = aligned_alloc(4096, 2 * len);
	assert_non_null(mem);
	memset(mem, 0xee, 2 * len);
	struct dlshim_engine_opts o = {.shm_base = mem, .shm_len = len, .evict = DLSHIM_EVICT_LRU, .seed = 1};
	struct dlshim_engine *e = dlshim_engine_create(&o);
	assert_non_null(e);
	struct dlshim_shm_view v;
	assert_int_equal(dlshim_shm_attach(mem, len, &v), 0);
	int j = dlshim_engine_job_attach(e, "hdr");
	struct dlshim_file_id id = fid(1, 3 * BS, 1);
	struct dlshim_open_result r;
	dlshim_engine_open(e, j, &id, 0, &r);
	assert_int_equal(r.kind, DLSHIM_OPEN_LOAD);
	uint64_t g = dlshim_engine_load_done(e, j, r.item, 1);
	struct dlshim_shm_header *h = (void *)mem;
	uint32_t *next = (uint32_t *)(mem + h->next_off);
	uint64_t nb0 = h->nblocks;
	uint32_t b0 = v.slots[r.slot].first_block, b1 = next[b0];
	/* Point the chain at a block beyond the segment and widen nblocks. */
	uint32_t outside = (uint32_t)((len - h->data_off) / BS + 2);
	assert_true(outside >= nb0);
	assert_true(h->data_off + ((uint64_t)outside + 1) * BS <= 2 * len);
	next[b0] = outside;
	h->nblocks = outside + 8;
	uint8_t buf[16];
	ssize_t n = dlshim_shm_read(&v, r.slot, g, BS, buf, sizeof(buf), NULL);
	h->nblocks = nb0;
	next[b0] = b1;
	dlshim_engine_destroy(e);
	free(mem);
	assert_int_equal(n, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout_sizes),
		cmocka_unit_test(test_attach_accepts_engine_segments),
		cmocka_unit_test(test_create_exact_layout),
		cmocka_unit_test_setup_teardown(test_attach_rejects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_cursor, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_bad_gen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_stale_after_evict_and_reuse, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_corrupt_chain, setup, teardown),
		cmocka_unit_test(test_read_header_changed_after_attach),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
