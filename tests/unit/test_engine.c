/* Unit tests for the engine (include/dlshim/engine.h) driven directly on a
 * private aligned buffer as the shared segment: no sockets, no processes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlshim/engine.h"
#include "dlshim/shm.h"

#define BS DLSHIM_BLOCK_SIZE
#define MIB (1024u * 1024u)
#define FSZ 100000u /* 7 blocks */
#define FBLK 7u
#define NO_SLOT UINT32_MAX

struct fx {
	uint8_t *mem;
	size_t len;
	struct dlshim_engine *e;
	struct dlshim_shm_view v;
	int job;
	uint64_t nblocks;
};

static uint8_t pat(uint64_t ino, int64_t mtime, uint64_t off)
{
	uint64_t z = off * 0x9e3779b97f4a7c15ULL + ino * 0x100000001b3ULL + (uint64_t)mtime;
	return (uint8_t)(z >> 56 ^ z >> 13 ^ off);
}

static struct fx *fx_new_opts(size_t len, enum dlshim_evict pol, uint64_t seed, uint64_t max_item)
{
	struct fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->len = len;
	f->mem = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	assert_non_null(f->mem);
	memset(f->mem, 0xa5, len);
	struct dlshim_engine_opts o = {
		.shm_base = f->mem, .shm_len = len, .evict = pol, .seed = seed, .max_item_bytes = max_item};
	f->e = dlshim_engine_create(&o);
	assert_non_null(f->e);
	assert_int_equal(dlshim_shm_attach(f->mem, len, &f->v), 0);
	f->nblocks = f->v.hdr->nblocks;
	f->job = dlshim_engine_job_attach(f->e, "main");
	assert_int_equal(f->job, 0);
	return f;
}

static struct fx *fx_new(enum dlshim_evict pol) { return fx_new_opts(MIB, pol, 1, 0); }

static void fx_free(struct fx *f)
{
	if (f == NULL)
		return;
	dlshim_engine_destroy(f->e);
	free(f->mem);
	free(f);
}

static int setup_lru(void **state) { *state = fx_new(DLSHIM_EVICT_LRU); return 0; }
static int setup_refcnt(void **state) { *state = fx_new(DLSHIM_EVICT_REFCNT); return 0; }
static int teardown(void **state) { fx_free(*state); return 0; }

static struct dlshim_file_id fid(uint64_t ino, uint64_t size, int64_t mtime)
{
	struct dlshim_file_id id = {.dev = 1, .ino = ino, .size = size, .mtime_ns = mtime};
	return id;
}

static struct dlshim_file_id F(uint64_t ino) { return fid(ino, FSZ, 1); }

static void fill(struct fx *f, uint32_t slot, const struct dlshim_file_id *id)
{
	uint64_t off = 0;
	while (off < id->size) {
		struct iovec iov[4];
		int n = dlshim_engine_slot_iov(f->e, slot, off, iov, 4);
		assert_true(n > 0);
		for (int i = 0; i < n; i++) {
			uint8_t *p = iov[i].iov_base;
			for (size_t k = 0; k < iov[i].iov_len; k++)
				p[k] = pat(id->ino, id->mtime_ns, off + k);
			off += iov[i].iov_len;
		}
	}
	assert_int_equal(off, id->size);
}

/* Check the bytes of a published slot through the client path. */
static void verify(struct fx *f, uint32_t slot, uint64_t gen, const struct dlshim_file_id *id)
{
	uint8_t *buf = malloc(id->size + 1);
	assert_non_null(buf);
	assert_int_equal(dlshim_shm_read(&f->v, slot, gen, 0, buf, id->size + 1, NULL), (ssize_t)id->size);
	for (uint64_t k = 0; k < id->size; k++)
		if (buf[k] != pat(id->ino, id->mtime_ns, k))
			fail_msg("ino %llu byte %llu", (unsigned long long)id->ino, (unsigned long long)k);
	free(buf);
}

static void open_x(struct fx *f, int job, const struct dlshim_file_id *id, unsigned flags, struct dlshim_open_result *r,
		   enum dlshim_open_kind want)
{
	dlshim_engine_open(f->e, job, id, flags, r);
	if (r->kind != want)
		fail_msg("ino %llu: open kind %d, want %d", (unsigned long long)id->ino, r->kind, want);
}

/* LOAD, fill, publish; the loader's pin stays. */
static uint64_t load_pinned(struct fx *f, int job, const struct dlshim_file_id *id, uint32_t *slot, uint32_t *item)
{
	struct dlshim_open_result r;
	open_x(f, job, id, 0, &r, DLSHIM_OPEN_LOAD);
	assert_int_equal(r.size, id->size);
	fill(f, r.slot, id);
	uint64_t g = dlshim_engine_load_done(f->e, job, r.item, 1);
	assert_true(g != 0 && (g & 1) == 0);
	if (slot)
		*slot = r.slot;
	if (item)
		*item = r.item;
	return g;
}

/* LOAD, publish and release. Returns the item. */
static uint32_t load_rel(struct fx *f, int job, const struct dlshim_file_id *id)
{
	uint32_t s, it;
	uint64_t g = load_pinned(f, job, id, &s, &it);
	assert_int_equal(dlshim_engine_release(f->e, job, s, g, 0, 0), 0);
	return it;
}

/* HIT and release. */
static void hit_rel(struct fx *f, int job, const struct dlshim_file_id *id)
{
	struct dlshim_open_result r;
	open_x(f, job, id, 0, &r, DLSHIM_OPEN_HIT);
	assert_int_equal(dlshim_engine_release(f->e, job, r.slot, r.gen, 0, 0), 0);
}

static int resident(struct fx *f, uint64_t ino)
{
	uint32_t it = dlshim_engine_find_item(f->e, 1, ino);
	return it != DLSHIM_NO_ITEM && dlshim_engine_item_resident(f->e, it);
}

static struct dlshim_cache_stats cstats(struct fx *f)
{
	struct dlshim_cache_stats cs;
	dlshim_engine_cache_stats(f->e, &cs);
	return cs;
}

static struct dlshim_job_stats jstats(struct fx *f, int job)
{
	struct dlshim_job_stats st;
	dlshim_engine_job_stats(f->e, job, &st);
	return st;
}

/* ---- catalog ------------------------------------------------------------ */

/* Same (dev, ino) is one item whatever its size/mtime; any other pair is a new item. */
static void test_catalog_identity(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id a = fid(5, 10, 1), a2 = fid(5, 20, 2), b = fid(6, 10, 1), c = {.dev = 2, .ino = 5};
	uint32_t ia = dlshim_engine_job_add_item(f->e, f->job, &a);
	assert_int_equal(ia, 0);
	assert_int_equal(dlshim_engine_job_add_item(f->e, f->job, &a2), ia);
	uint32_t ib = dlshim_engine_job_add_item(f->e, f->job, &b);
	uint32_t ic = dlshim_engine_job_add_item(f->e, f->job, &c);
	assert_int_equal(ib, 1);
	assert_int_equal(ic, 2);
	assert_int_equal(dlshim_engine_find_item(f->e, 1, 5), ia);
	assert_int_equal(dlshim_engine_find_item(f->e, 1, 6), ib);
	assert_int_equal(dlshim_engine_find_item(f->e, 2, 5), ic);
	assert_int_equal(dlshim_engine_find_item(f->e, 2, 6), DLSHIM_NO_ITEM);
	struct dlshim_open_result r;
	open_x(f, f->job, &a, 0, &r, DLSHIM_OPEN_LOAD);
	assert_int_equal(r.item, ia);
	assert_int_equal(cstats(f).items_known, 3);
	/* Many items: ids stay dense and lookups stable across catalog growth. */
	for (uint64_t i = 0; i < 5000; i++) {
		struct dlshim_file_id x = fid(1000 + i, 1, 1);
		assert_int_equal(dlshim_engine_job_add_item(f->e, f->job, &x), 3 + i);
	}
	assert_int_equal(dlshim_engine_find_item(f->e, 1, 1000 + 4321), 3 + 4321);
	assert_int_equal(dlshim_engine_find_item(f->e, 1, 5), ia);
	assert_int_equal(cstats(f).items_known, 5003);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, 3 + 4999), 1);
}

/* ---- open / load / hit -------------------------------------------------- */

/* LOAD then load_done publishes: the next open HITs with the same gen and slot. */
static void test_hit_after_load(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id a = F(1);
	uint32_t s, it;
	struct dlshim_open_result r;
	open_x(f, f->job, &a, 0, &r, DLSHIM_OPEN_LOAD);
	assert_int_equal(r.gen, 0);
	assert_false(dlshim_engine_item_resident(f->e, r.item));
	assert_int_equal(dlshim_engine_item_pins(f->e, r.item), 1);
	fill(f, r.slot, &a);
	uint64_t g = dlshim_engine_load_done(f->e, f->job, r.item, 1);
	s = r.slot;
	it = r.item;
	assert_true(dlshim_engine_item_resident(f->e, it));
	assert_int_equal(atomic_load(&f->v.slots[s].gen), g);
	verify(f, s, g, &a);
	/* load_done twice is refused. */
	assert_int_equal(dlshim_engine_load_done(f->e, f->job, it, 1), 0);
	assert_int_equal(dlshim_engine_load_done(f->e, f->job, 12345, 1), 0);
	open_x(f, f->job, &a, 0, &r, DLSHIM_OPEN_HIT);
	assert_int_equal(r.slot, s);
	assert_int_equal(r.gen, g);
	assert_int_equal(r.item, it);
	assert_int_equal(r.size, FSZ);
	assert_int_equal(dlshim_engine_item_pins(f->e, it), 2);
	assert_int_equal(cstats(f).items_pinned, 1);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, g, 0, 0), 0);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, g, 0, 0), 0);
	assert_int_equal(dlshim_engine_item_pins(f->e, it), 0);
	assert_int_equal(cstats(f).items_pinned, 0);
	/* Published gen is stable across unpinned hits. */
	open_x(f, f->job, &a, 0, &r, DLSHIM_OPEN_HIT);
	assert_int_equal(r.gen, g);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, g, 0, 0), 0);
}

/* A changed mtime reloads into a new slot; the old pinned slot stays readable until released, then is freed. */
static void test_stale_mtime_orphan(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id a = F(1), a2 = fid(1, FSZ, 2);
	uint32_t s1, it;
	uint64_t g1 = load_pinned(f, f->job, &a, &s1, &it);
	assert_int_equal(cstats(f).used_bytes, FBLK * BS);
	struct dlshim_open_result r;
	open_x(f, f->job, &a2, 0, &r, DLSHIM_OPEN_LOAD);
	assert_int_equal(r.item, it);
	assert_true(r.slot != s1);
	struct dlshim_cache_stats cs = cstats(f);
	assert_int_equal(cs.stale_reloads, 1);
	assert_int_equal(cs.used_bytes, 2 * FBLK * BS);
	assert_int_equal(cs.items_pinned, 2);
	assert_int_equal(cs.items_resident, 1);
	/* The orphan still serves the old bytes to its holder. */
	verify(f, s1, g1, &a);
	fill(f, r.slot, &a2);
	uint64_t g2 = dlshim_engine_load_done(f->e, f->job, it, 1);
	verify(f, r.slot, g2, &a2);
	verify(f, s1, g1, &a);
	/* Releasing the orphan frees it. */
	assert_int_equal(dlshim_engine_release(f->e, f->job, s1, g1, 0, 0), 0);
	uint8_t b[8];
	assert_int_equal(dlshim_shm_read(&f->v, s1, g1, 0, b, 8, NULL), -1);
	cs = cstats(f);
	assert_int_equal(cs.used_bytes, FBLK * BS);
	assert_int_equal(cs.items_pinned, 1);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s1, g1, 0, 0), -1);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, g2, 0, 0), 0);
	assert_int_equal(cstats(f).items_pinned, 0);
	/* The new version hits; the old identity is stale again. */
	open_x(f, f->job, &a2, 0, &r, DLSHIM_OPEN_HIT);
	assert_int_equal(r.gen, g2);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, r.gen, 0, 0), 0);
	assert_int_equal(cstats(f).stale_reloads, 1);
}

/* Same size and mtime but a new ctime (mtime put back after a rewrite, or a
 * reused inode number): a new version, reloaded; the shared index no longer
 * finds the old one. */
static void test_stale_ctime(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id a = F(1), a2 = F(1);
	a2.ctime_ns = 99;
	uint32_t s1, it;
	uint64_t g1 = load_pinned(f, f->job, &a, &s1, &it), g;
	assert_int_equal(dlshim_engine_release(f->e, f->job, s1, g1, 0, 0), 0);
	assert_int_equal(dlshim_shm_lookup(&f->v, 1, 1, FSZ, 1, 0, &g), (long)s1);
	assert_int_equal(dlshim_shm_lookup(&f->v, 1, 1, FSZ, 1, 99, &g), -1);
	struct dlshim_open_result r;
	open_x(f, f->job, &a2, 0, &r, DLSHIM_OPEN_LOAD);
	assert_int_equal(cstats(f).stale_reloads, 1);
	assert_int_equal(dlshim_shm_lookup(&f->v, 1, 1, FSZ, 1, 0, &g), -1);
	dlshim_engine_load_done(f->e, f->job, it, 0);
}

/* A changed size reloads too; an unpinned old slot is freed at once. */
static void test_stale_size_unpinned(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id a = F(1), a2 = fid(1, 50000, 1);
	uint32_t it = load_rel(f, f->job, &a);
	struct dlshim_open_result r;
	open_x(f, f->job, &a2, 0, &r, DLSHIM_OPEN_LOAD);
	assert_int_equal(r.item, it);
	assert_int_equal(r.size, 50000);
	struct dlshim_cache_stats cs = cstats(f);
	assert_int_equal(cs.stale_reloads, 1);
	assert_int_equal(cs.used_bytes, 4 * BS); /* 50000 bytes = 4 blocks; old 7 freed */
	assert_int_equal(cs.items_pinned, 1);
	fill(f, r.slot, &a2);
	uint64_t g = dlshim_engine_load_done(f->e, f->job, it, 1);
	verify(f, r.slot, g, &a2);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, g, 0, 0), 0);
	assert_int_equal(jstats(f, f->job).bytes_from_disk, FSZ + 50000);
}

/* WAIT while another caller loads; a retry after load_done HITs and is not a new request. */
static void test_wait_while_loading(void **state)
{
	struct fx *f = *state;
	int j2 = dlshim_engine_job_attach(f->e, "other");
	assert_int_equal(j2, 1);
	struct dlshim_file_id a = F(1);
	struct dlshim_open_result r1, r2;
	open_x(f, f->job, &a, 0, &r1, DLSHIM_OPEN_LOAD);
	open_x(f, j2, &a, 0, &r2, DLSHIM_OPEN_WAIT);
	assert_int_equal(r2.slot, NO_SLOT);
	open_x(f, j2, &a, DLSHIM_OPEN_F_RETRY, &r2, DLSHIM_OPEN_WAIT);
	open_x(f, f->job, &a, DLSHIM_OPEN_F_RETRY, &r2, DLSHIM_OPEN_WAIT);
	fill(f, r1.slot, &a);
	uint64_t g = dlshim_engine_load_done(f->e, f->job, r1.item, 1);
	open_x(f, j2, &a, DLSHIM_OPEN_F_RETRY, &r2, DLSHIM_OPEN_HIT);
	assert_int_equal(r2.slot, r1.slot);
	assert_int_equal(r2.gen, g);
	assert_int_equal(dlshim_engine_item_pins(f->e, r1.item), 2);
	struct dlshim_job_stats s2 = jstats(f, j2);
	assert_int_equal(s2.requests, 1);
	assert_int_equal(s2.waits, 2);
	assert_int_equal(s2.hits, 1);
	assert_int_equal(s2.misses, 0);
	struct dlshim_job_stats s1 = jstats(f, f->job);
	assert_int_equal(s1.requests, 1);
	assert_int_equal(s1.waits, 1);
	assert_int_equal(s1.misses, 1);
	assert_int_equal(s1.files_loaded, 1);
	assert_int_equal(dlshim_engine_release(f->e, j2, r2.slot, g, FSZ, 0), 0);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r1.slot, g, 0, 0), 0);
	assert_int_equal(jstats(f, j2).bytes_from_cache, FSZ);
}

/* PASS above max_item_bytes (not an alloc failure) and for files bigger than the cache. */
static void test_pass_too_big(void **state)
{
	(void)state;
	struct fx *f = fx_new_opts(MIB, DLSHIM_EVICT_LRU, 1, 200000);
	struct dlshim_file_id big = fid(1, 200001, 1), ok = fid(2, 200000, 1);
	struct dlshim_open_result r;
	open_x(f, f->job, &big, 0, &r, DLSHIM_OPEN_PASS);
	assert_int_equal(r.slot, NO_SLOT);
	assert_int_equal(cstats(f).alloc_failures, 0);
	assert_int_equal(cstats(f).used_bytes, 0);
	load_rel(f, f->job, &ok);
	struct dlshim_job_stats st = jstats(f, f->job);
	assert_int_equal(st.passthrough, 1);
	assert_int_equal(st.requests, 2);
	assert_int_equal(st.misses, 1);
	dlshim_engine_note_pass(f->e, f->job, 200001);
	assert_int_equal(jstats(f, f->job).bytes_passthrough, 200001);
	fx_free(f);
	/* No max: a file larger than the whole cache passes and counts as an alloc failure. */
	f = fx_new(DLSHIM_EVICT_LRU);
	struct dlshim_file_id huge = fid(3, f->nblocks * BS + 1, 1);
	load_rel(f, f->job, &ok);
	open_x(f, f->job, &huge, 0, &r, DLSHIM_OPEN_PASS);
	assert_int_equal(cstats(f).alloc_failures, 1);
	assert_true(resident(f, 2)); /* nothing evicted for a hopeless request */
	fx_free(f);
}

/* PASS when every block is pinned: nothing evicted, alloc_failures counted, the item loads once space frees. */
static void test_pass_all_pinned(void **state)
{
	struct fx *f = *state;
	uint64_t fit = f->nblocks / FBLK;
	assert_int_equal(fit, 9);
	uint32_t s[16];
	uint64_t g[16];
	for (uint64_t i = 0; i < fit; i++) {
		struct dlshim_file_id x = F(i + 1);
		g[i] = load_pinned(f, f->job, &x, &s[i], NULL);
	}
	struct dlshim_file_id y = F(100);
	struct dlshim_open_result r;
	open_x(f, f->job, &y, 0, &r, DLSHIM_OPEN_PASS);
	open_x(f, f->job, &y, 0, &r, DLSHIM_OPEN_PASS);
	struct dlshim_cache_stats cs = cstats(f);
	assert_int_equal(cs.alloc_failures, 2);
	assert_int_equal(cs.evictions, 0);
	assert_int_equal(cs.items_pinned, fit);
	for (uint64_t i = 0; i < fit; i++)
		assert_true(resident(f, i + 1));
	assert_int_equal(jstats(f, f->job).passthrough, 2);
	/* Releasing one makes room: the next open evicts exactly it and loads. */
	assert_int_equal(dlshim_engine_release(f->e, f->job, s[4], g[4], 0, 0), 0);
	open_x(f, f->job, &y, 0, &r, DLSHIM_OPEN_LOAD);
	assert_false(resident(f, 5));
	assert_int_equal(cstats(f).evictions, 1);
	assert_int_equal(jstats(f, f->job).evictions, 1);
	assert_int_equal(dlshim_engine_load_done(f->e, f->job, r.item, 0), 0);
	for (uint64_t i = 0; i < fit; i++)
		if (i != 4)
			assert_int_equal(dlshim_engine_release(f->e, f->job, s[i], g[i], 0, 0), 0);
	assert_int_equal(cstats(f).items_pinned, 0);
}

/* PASS when every slot is pinned (zero-size files use a slot but no block). */
static void test_pass_no_slot(void **state)
{
	struct fx *f = *state;
	uint64_t ns = f->v.hdr->nslots;
	for (uint64_t i = 0; i < ns; i++) {
		struct dlshim_file_id z = fid(i + 1, 0, 1);
		uint32_t s;
		load_pinned(f, f->job, &z, &s, NULL);
		assert_int_equal(f->v.slots[s].nblocks, 0);
	}
	assert_int_equal(cstats(f).used_bytes, 0);
	struct dlshim_file_id z = fid(ns + 1, 0, 1), one = fid(ns + 2, 1, 1);
	struct dlshim_open_result r;
	open_x(f, f->job, &z, 0, &r, DLSHIM_OPEN_PASS);
	open_x(f, f->job, &one, 0, &r, DLSHIM_OPEN_PASS);
	assert_int_equal(cstats(f).alloc_failures, 2);
	assert_int_equal(cstats(f).items_pinned, ns);
}

/* Pins: a pinned item is never a victim; once all pins go it is evictable again. */
static void test_pins_block_eviction(void **state)
{
	struct fx *f = *state;
	int j2 = dlshim_engine_job_attach(f->e, "b");
	struct dlshim_file_id a = F(1);
	uint32_t sa, ia;
	uint64_t ga = load_pinned(f, f->job, &a, &sa, &ia);
	struct dlshim_open_result r;
	open_x(f, j2, &a, 0, &r, DLSHIM_OPEN_HIT);
	assert_int_equal(dlshim_engine_item_pins(f->e, ia), 2);
	assert_int_equal(dlshim_engine_release(f->e, f->job, sa, ga, 0, 0), 0);
	assert_int_equal(dlshim_engine_item_pins(f->e, ia), 1);
	/* Cycle many files through the cache: `a` (least recent, but pinned) survives. */
	for (uint64_t i = 2; i < 40; i++) {
		struct dlshim_file_id x = F(i);
		load_rel(f, f->job, &x);
		assert_true(resident(f, 1));
	}
	verify(f, sa, ga, &a);
	assert_int_equal(dlshim_engine_release(f->e, j2, sa, ga, 0, 0), 0);
	assert_int_equal(dlshim_engine_item_pins(f->e, ia), 0);
	for (uint64_t i = 40; i < 50; i++) {
		struct dlshim_file_id x = F(i);
		load_rel(f, f->job, &x);
	}
	assert_false(resident(f, 1));
	assert_int_equal(dlshim_shm_read(&f->v, sa, ga, 0, &r, 1, NULL), -1);
}

/* release with a wrong gen, an unpinned slot or a bad slot returns -1 and changes nothing. */
static void test_release_wrong_gen(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id a = F(1);
	uint32_t s, it;
	uint64_t g = load_pinned(f, f->job, &a, &s, &it);
	struct dlshim_cache_stats before = cstats(f);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, g + 2, 0, 0), -1);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, g - 2, 0, 0), -1);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, g + 1, 0, 0), -1);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s + 1, g, 0, 0), -1);
	assert_int_equal(dlshim_engine_release(f->e, f->job, (uint32_t)f->v.hdr->nslots, g, 0, 0), -1);
	assert_int_equal(dlshim_engine_release(f->e, f->job, UINT32_MAX - 1, g, 0, 0), -1);
	assert_int_equal(dlshim_engine_item_pins(f->e, it), 1);
	struct dlshim_cache_stats after = cstats(f);
	assert_memory_equal(&before, &after, sizeof(before));
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, g, 0, 0), 0);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, g, 0, 0), -1); /* no pin left */
	assert_int_equal(dlshim_engine_item_pins(f->e, it), 0);
	assert_int_equal(cstats(f).items_pinned, 0);
	/* slot UINT32_MAX only accounts bytes. */
	assert_int_equal(dlshim_engine_release(f->e, f->job, NO_SLOT, 0, 10, 20), 0);
	struct dlshim_job_stats st = jstats(f, f->job);
	assert_int_equal(st.bytes_from_cache, 10);
	assert_int_equal(st.bytes_passthrough, 20);
}

/* release with the generation of a slot's previous occupant, while a new
 * file is loading into that slot, is refused and leaves the loader's pin. */
static void test_release_old_gen_after_reuse(void **state)
{
	struct fx *f = *state;
	uint64_t fit = f->nblocks / FBLK;
	struct dlshim_file_id a = F(1);
	uint32_t sa, ia;
	uint64_t ga = load_pinned(f, f->job, &a, &sa, &ia);
	assert_int_equal(dlshim_engine_release(f->e, f->job, sa, ga, 0, 0), 0);
	for (uint64_t i = 2; i <= fit; i++) {
		struct dlshim_file_id x = F(i);
		load_rel(f, f->job, &x);
	}
	/* The next load evicts `a` (LRU) and, slots being reused, takes its slot. */
	struct dlshim_file_id b = F(100);
	struct dlshim_open_result r;
	open_x(f, f->job, &b, 0, &r, DLSHIM_OPEN_LOAD);
	assert_false(resident(f, 1));
	assert_int_equal(r.slot, sa);
	assert_int_equal(dlshim_engine_item_pins(f->e, r.item), 1);
	/* A late duplicate release of a's pin must not unpin b's loader. */
	int rc = dlshim_engine_release(f->e, f->job, sa, ga, 0, 0);
	uint32_t pins = dlshim_engine_item_pins(f->e, r.item);
	uint64_t pinned = cstats(f).items_pinned;
	/* If it did, b is now evictable while loading: one more file evicts it. */
	struct dlshim_file_id c = F(101);
	struct dlshim_open_result rc2;
	dlshim_engine_open(f->e, f->job, &c, 0, &rc2);
	uint64_t g = dlshim_engine_load_done(f->e, f->job, r.item, 1);
	assert_int_equal(rc, -1);
	assert_int_equal(pins, 1);
	assert_int_equal(pinned, 1);
	assert_true(g != 0);
}

/* A failed load frees the slot and the next open LOADs again. */
static void test_failed_load(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id a = F(1);
	struct dlshim_open_result r;
	open_x(f, f->job, &a, 0, &r, DLSHIM_OPEN_LOAD);
	uint32_t s = r.slot;
	assert_int_equal(cstats(f).used_bytes, FBLK * BS);
	assert_int_equal(dlshim_engine_load_done(f->e, f->job, r.item, 0), 0);
	struct dlshim_cache_stats cs = cstats(f);
	assert_int_equal(cs.used_bytes, 0);
	assert_int_equal(cs.items_pinned, 0);
	assert_int_equal(cs.items_resident, 0);
	assert_int_equal(cs.loads, 0);
	assert_false(dlshim_engine_item_resident(f->e, r.item));
	assert_int_equal(dlshim_engine_item_pins(f->e, r.item), 0);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, 0, 0, 0), -1);
	assert_int_equal(atomic_load(&f->v.slots[s].gen) & 1, 1);
	/* A waiter asking again now gets the LOAD itself. */
	int j2 = dlshim_engine_job_attach(f->e, "w");
	open_x(f, j2, &a, 0, &r, DLSHIM_OPEN_LOAD);
	assert_int_equal(jstats(f, j2).misses, 1);
	fill(f, r.slot, &a);
	uint64_t g = dlshim_engine_load_done(f->e, j2, r.item, 1);
	verify(f, r.slot, g, &a);
	assert_int_equal(dlshim_engine_release(f->e, j2, r.slot, g, 0, 0), 0);
	assert_int_equal(jstats(f, f->job).files_loaded, 0);
	assert_int_equal(jstats(f, j2).files_loaded, 1);
	assert_int_equal(cstats(f).loads, 1);
}

/* ---- eviction order at the engine level --------------------------------- */

/* Fill a 1 MiB cache with 9 files, hit file 1, then load 3 more: which files survive. */
static void run_order(enum dlshim_evict pol, const int *want_gone, int ngone)
{
	struct fx *f = fx_new(pol);
	assert_int_equal(f->nblocks / FBLK, 9);
	for (uint64_t i = 1; i <= 9; i++) {
		struct dlshim_file_id x = F(i);
		load_rel(f, f->job, &x);
	}
	struct dlshim_file_id one = F(1);
	hit_rel(f, f->job, &one);
	for (uint64_t i = 10; i <= 12; i++) {
		struct dlshim_file_id x = F(i);
		load_rel(f, f->job, &x);
	}
	char got[64] = "", want[64] = "";
	for (uint64_t i = 1; i <= 12; i++)
		if (!resident(f, i))
			snprintf(got + strlen(got), sizeof(got) - strlen(got), "%llu ", (unsigned long long)i);
	for (int k = 0; k < ngone; k++)
		snprintf(want + strlen(want), sizeof(want) - strlen(want), "%d ", want_gone[k]);
	assert_int_equal(cstats(f).evictions, 3);
	fx_free(f);
	assert_string_equal(got, want);
}

/* LRU: the hit on file 1 saves it; 2, 3, 4 go. */
static void test_order_lru(void **state)
{
	(void)state;
	int gone[] = {2, 3, 4};
	run_order(DLSHIM_EVICT_LRU, gone, 3);
}

/* FIFO: first loaded, first evicted, hits notwithstanding: 1, 2, 3 go. */
static void test_order_fifo(void **state)
{
	(void)state;
	int gone[] = {1, 2, 3};
	run_order(DLSHIM_EVICT_FIFO, gone, 3);
}

/* RefCnt with no other job: all counts 0, so LRU within the bucket: 2, 3, 4 go. */
static void test_order_refcnt_single(void **state)
{
	(void)state;
	int gone[] = {2, 3, 4};
	run_order(DLSHIM_EVICT_REFCNT, gone, 3);
}

/* RefCnt: items another job still needs outlive older items nobody needs. */
static void test_order_refcnt_jobs(void **state)
{
	struct fx *f = *state;
	int jb = dlshim_engine_job_attach(f->e, "b");
	/* Job b's dataset: files 1..4 and 20 (never opened, keeps b's epoch open). */
	for (uint64_t i = 1; i <= 4; i++) {
		struct dlshim_file_id x = F(i);
		dlshim_engine_job_add_item(f->e, jb, &x);
	}
	struct dlshim_file_id x20 = F(20);
	dlshim_engine_job_add_item(f->e, jb, &x20);
	for (uint64_t i = 1; i <= 9; i++) {
		struct dlshim_file_id x = F(i);
		load_rel(f, f->job, &x);
	}
	assert_int_equal(dlshim_engine_item_refcnt(f->e, dlshim_engine_find_item(f->e, 1, 1)), 1);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, dlshim_engine_find_item(f->e, 1, 5)), 0);
	/* Four new files evict 5, 6, 7, 8 (count 0, oldest first) although 1..4 are older. */
	for (uint64_t i = 10; i <= 13; i++) {
		struct dlshim_file_id x = F(i);
		load_rel(f, f->job, &x);
	}
	for (uint64_t i = 1; i <= 4; i++)
		assert_true(resident(f, i));
	for (uint64_t i = 5; i <= 8; i++)
		assert_false(resident(f, i));
	/* b consumes file 2: its count drops to 0 and it joins the count-0 bucket as most recent. */
	hit_rel(f, jb, &(struct dlshim_file_id){.dev = 1, .ino = 2, .size = FSZ, .mtime_ns = 1});
	assert_int_equal(dlshim_engine_item_refcnt(f->e, dlshim_engine_find_item(f->e, 1, 2)), 0);
	/* Count-0 LRU order now: 9, 10, 11, 12, 13, 2; then 1, 3, 4. */
	for (uint64_t i = 14; i <= 14 + 6; i++) {
		struct dlshim_file_id x = F(i);
		if (i == 20)
			continue; /* b's item: keep its count */
		load_rel(f, f->job, &x);
	}
	/* Six loads evicted 9..13 and 2. */
	assert_false(resident(f, 2));
	for (uint64_t i = 9; i <= 13; i++)
		assert_false(resident(f, i));
	assert_true(resident(f, 1));
	assert_true(resident(f, 3));
	assert_true(resident(f, 4));
	/* Job b ends: its counts drop and 1, 3, 4 join the count-0 bucket (at its
	 * front, as recounts do), so the oldest count-0 item, 14, goes next. */
	dlshim_engine_job_detach(f->e, jb);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, dlshim_engine_find_item(f->e, 1, 1)), 0);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, dlshim_engine_find_item(f->e, 1, 20)), 0);
	struct dlshim_file_id x = F(30);
	load_rel(f, f->job, &x);
	assert_false(resident(f, 14));
	assert_true(resident(f, 1));
	assert_true(resident(f, 3));
	assert_true(resident(f, 4));
	assert_int_equal(cstats(f).evictions, 11);
}

/* Random: never evicts a pinned item; the same seed gives the same victims. */
static void test_order_random(void **state)
{
	(void)state;
	char runs[2][64];
	for (int run = 0; run < 2; run++) {
		struct fx *f = fx_new_opts(MIB, DLSHIM_EVICT_RANDOM, 99, 0);
		uint32_t s[10];
		uint64_t g[10];
		for (uint64_t i = 1; i <= 9; i++) {
			struct dlshim_file_id x = F(i);
			g[i] = load_pinned(f, f->job, &x, &s[i], NULL);
		}
		/* Only 3, 6, 8 are unpinned. */
		uint64_t unp[] = {3, 6, 8};
		for (int k = 0; k < 3; k++)
			assert_int_equal(dlshim_engine_release(f->e, f->job, s[unp[k]], g[unp[k]], 0, 0), 0);
		for (uint64_t i = 10; i <= 11; i++) {
			struct dlshim_file_id x = F(i);
			uint32_t sx;
			load_pinned(f, f->job, &x, &sx, NULL);
		}
		int gone = 0;
		runs[run][0] = 0;
		for (uint64_t i = 1; i <= 9; i++)
			if (!resident(f, i)) {
				assert_true(i == 3 || i == 6 || i == 8);
				gone++;
				snprintf(runs[run] + strlen(runs[run]), 64 - strlen(runs[run]), "%llu ",
					 (unsigned long long)i);
			}
		assert_int_equal(gone, 2);
		struct dlshim_file_id x = F(12);
		struct dlshim_open_result r;
		open_x(f, f->job, &x, 0, &r, DLSHIM_OPEN_LOAD); /* the last unpinned one */
		open_x(f, f->job, &(struct dlshim_file_id){.dev = 1, .ino = 13, .size = FSZ}, 0, &r, DLSHIM_OPEN_PASS);
		for (uint64_t i = 1; i <= 9; i++)
			assert_int_equal(resident(f, i), !(i == 3 || i == 6 || i == 8));
		fx_free(f);
	}
	assert_string_equal(runs[0], runs[1]);
}

/* ---- jobs and reference counts ------------------------------------------ */

/* Two jobs on one dataset: counts drop as each consumes, epochs roll over and
 * restore counts, detach drops a job's remaining counts. */
static void test_refcnt_two_jobs(void **state)
{
	struct fx *f = *state;
	int ja = f->job, jb = dlshim_engine_job_attach(f->e, "b");
	struct dlshim_file_id A = F(1), B = F(2), C = F(3);
	uint32_t ia = dlshim_engine_job_add_item(f->e, ja, &A);
	uint32_t ib = dlshim_engine_job_add_item(f->e, ja, &B);
	uint32_t ic = dlshim_engine_job_add_item(f->e, ja, &C);
	assert_int_equal(dlshim_engine_job_add_item(f->e, jb, &A), ia);
	dlshim_engine_job_add_item(f->e, jb, &B);
	dlshim_engine_job_add_item(f->e, jb, &C);
	dlshim_engine_job_add_item(f->e, ja, &A); /* repeat: no change */
	dlshim_engine_job_add_item(f->e, jb, &A);
	dlshim_engine_job_dataset_done(f->e, ja, DLSHIM_REDIRECT_OFF, 0);
	dlshim_engine_job_dataset_done(f->e, jb, DLSHIM_REDIRECT_OFF, 0);
	assert_true(dlshim_engine_job_has_dataset(f->e, ja));
#define RC(i) dlshim_engine_item_refcnt(f->e, (i))
	assert_int_equal(RC(ia), 2);
	assert_int_equal(RC(ib), 2);
	assert_int_equal(RC(ic), 2);
	load_rel(f, ja, &A);
	assert_int_equal(RC(ia), 1);
	hit_rel(f, ja, &A); /* re-reading in the same epoch consumes nothing */
	assert_int_equal(RC(ia), 1);
	hit_rel(f, jb, &A);
	assert_int_equal(RC(ia), 0);
	load_rel(f, ja, &B);
	assert_int_equal(RC(ib), 1);
	assert_int_equal(jstats(f, ja).epochs, 0);
	load_rel(f, ja, &C); /* a's epoch ends: a needs A, B, C again */
	assert_int_equal(jstats(f, ja).epochs, 1);
	assert_int_equal(jstats(f, jb).epochs, 0);
	assert_int_equal(RC(ia), 1);
	assert_int_equal(RC(ib), 2);
	assert_int_equal(RC(ic), 2);
	/* b ends: it still needed B and C this epoch. */
	dlshim_engine_job_detach(f->e, jb);
	assert_false(dlshim_engine_job_live(f->e, jb));
	assert_int_equal(RC(ia), 1);
	assert_int_equal(RC(ib), 1);
	assert_int_equal(RC(ic), 1);
	/* a's second epoch. */
	hit_rel(f, ja, &B);
	assert_int_equal(RC(ib), 0);
	hit_rel(f, ja, &A);
	hit_rel(f, ja, &C);
	assert_int_equal(jstats(f, ja).epochs, 2);
	assert_int_equal(RC(ia), 1);
	assert_int_equal(RC(ib), 1);
	assert_int_equal(RC(ic), 1);
	dlshim_engine_job_detach(f->e, ja);
	assert_int_equal(RC(ia), 0);
	assert_int_equal(RC(ib), 0);
	assert_int_equal(RC(ic), 0);
	/* Re-attaching b starts clean: nothing needed until declared. */
	assert_int_equal(dlshim_engine_job_attach(f->e, "b"), jb);
	assert_int_equal(RC(ia), 0);
	dlshim_engine_job_add_item(f->e, jb, &A);
	assert_int_equal(RC(ia), 1);
	assert_int_equal(RC(5000), 0); /* unknown item */
#undef RC
}

/* An open of a file outside the declared dataset adds it (dataset grows) without an early epoch. */
static void test_refcnt_open_undeclared(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id A = F(1), B = F(2);
	uint32_t ia = dlshim_engine_job_add_item(f->e, f->job, &A);
	dlshim_engine_job_dataset_done(f->e, f->job, DLSHIM_REDIRECT_OFF, 0);
	uint32_t ib = load_rel(f, f->job, &B); /* undeclared: needed and consumed at once */
	assert_int_equal(dlshim_engine_item_refcnt(f->e, ib), 0);
	assert_int_equal(jstats(f, f->job).epochs, 0);
	load_rel(f, f->job, &A);
	assert_int_equal(jstats(f, f->job).epochs, 1);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, ia), 1);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, ib), 1);
}

/* A load ahead of demand (HDF5 row chunks) is needed but not consumed, so
 * RefCnt keeps it until it is read; it is neither a request nor a miss, and
 * never waits or hits. */
static void test_load_ahead(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id B = F(2);
	struct dlshim_open_result r, r2;
	open_x(f, f->job, &B, DLSHIM_OPEN_F_AHEAD, &r, DLSHIM_OPEN_LOAD);
	assert_int_equal(jstats(f, f->job).requests, 0);
	assert_int_equal(jstats(f, f->job).misses, 0);
	assert_int_equal(jstats(f, f->job).loads_ahead, 1);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, r.item), 1);
	/* On its way: a second load ahead has nothing to do. */
	open_x(f, f->job, &B, DLSHIM_OPEN_F_AHEAD, &r2, DLSHIM_OPEN_PASS);
	fill(f, r.slot, &B);
	uint64_t g = dlshim_engine_load_done(f->e, f->job, r.item, 1);
	assert_int_not_equal(g, 0);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, g, 0, 0), 0);
	open_x(f, f->job, &B, DLSHIM_OPEN_F_AHEAD, &r2, DLSHIM_OPEN_PASS);
	assert_int_equal(jstats(f, f->job).hits, 0);
	assert_int_equal(jstats(f, f->job).loads_ahead, 1);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, r.item), 1);
	/* The real read: a hit, and now consumed. */
	open_x(f, f->job, &B, 0, &r2, DLSHIM_OPEN_HIT);
	verify(f, r2.slot, r2.gen, &B);
	assert_int_equal(jstats(f, f->job).requests, 1);
	assert_int_equal(jstats(f, f->job).hits, 1);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, r.item), 0);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r2.slot, r2.gen, 0, 0), 0);
}

/* Holds (HDF5 row chunks of a redirect mapping): a HELD open neither needs
 * nor consumes; a held item outlives unheld ones; a SPARE load evicts
 * only what no one holds or needs, else passes (spare_refused). */
static void test_holds_and_spare_loads(void **state)
{
	struct fx *f = *state;
	struct dlshim_open_result r;
	assert_int_equal(dlshim_engine_item_hold(f->e, 1, 999, +1), 0); /* unknown: nothing held */
	/* Fill the cache with held items. */
	uint64_t n = 0;
	for (;;) {
		struct dlshim_file_id x = F(n + 1);
		dlshim_engine_open(f->e, f->job, &x, DLSHIM_OPEN_F_HELD, &r);
		if (r.kind != DLSHIM_OPEN_LOAD || cstats(f).evictions > 0)
			fail_msg("item %llu: kind %d, evictions %llu", (unsigned long long)n + 1, r.kind,
				 (unsigned long long)cstats(f).evictions);
		assert_int_equal(dlshim_engine_item_refcnt(f->e, r.item), 0); /* not needed by the open */
		assert_int_equal(dlshim_engine_item_hold(f->e, 1, n + 1, +1), 1);
		assert_int_equal(dlshim_engine_item_holds(f->e, r.item), 1);
		fill(f, r.slot, &x);
		uint64_t g = dlshim_engine_load_done(f->e, f->job, r.item, 1);
		assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, g, 0, 0), 0);
		n++;
		if (cstats(f).used_bytes + FBLK * BS > cstats(f).capacity_bytes)
			break;
	}
	assert_true(n >= 4);
	/* Full of held items: a spare load ahead does not evict them. */
	struct dlshim_file_id nx = F(n + 1);
	open_x(f, f->job, &nx, DLSHIM_OPEN_F_AHEAD | DLSHIM_OPEN_F_HELD | DLSHIM_OPEN_F_SPARE, &r, DLSHIM_OPEN_PASS);
	assert_int_equal(cstats(f).spare_refused, 1);
	assert_int_equal(cstats(f).evictions, 0);
	/* Item 3's rows are all served: let go of it. The spare load takes its room, and only its. */
	assert_int_equal(dlshim_engine_item_hold(f->e, 1, 3, -1), 1);
	/* ... and the job consumed it (its I/O efficiency counts it); an unknown item counts nothing. */
	uint64_t consumed = jstats(f, f->job).bytes_consumed;
	dlshim_engine_item_spent(f->e, f->job, 1, 3);
	dlshim_engine_item_spent(f->e, f->job, 1, 999);
	assert_int_equal(jstats(f, f->job).bytes_consumed, consumed + FSZ);
	open_x(f, f->job, &nx, DLSHIM_OPEN_F_AHEAD | DLSHIM_OPEN_F_HELD | DLSHIM_OPEN_F_SPARE, &r, DLSHIM_OPEN_LOAD);
	fill(f, r.slot, &nx);
	uint64_t g = dlshim_engine_load_done(f->e, f->job, r.item, 1);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, g, 0, 0), 0);
	assert_false(resident(f, 3));
	for (uint64_t i = 1; i <= n; i++)
		if (i != 3)
			assert_true(resident(f, i));
	/* A request's load (not spare) evicts a held item when it must: the one with the fewest holds. */
	assert_int_equal(dlshim_engine_item_hold(f->e, 1, 1, +1), 1); /* item 1: two holds (two mappings) */
	struct dlshim_file_id d1 = F(n + 2);
	open_x(f, f->job, &d1, DLSHIM_OPEN_F_HELD, &r, DLSHIM_OPEN_LOAD);
	fill(f, r.slot, &d1);
	g = dlshim_engine_load_done(f->e, f->job, r.item, 1);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, g, 0, 0), 0);
	assert_true(resident(f, 1));
	assert_int_equal(cstats(f).evictions, 2);
	/* Holds never go below zero. */
	assert_int_equal(dlshim_engine_item_hold(f->e, 1, 3, -1), 1);
	assert_int_equal(dlshim_engine_item_holds(f->e, dlshim_engine_find_item(f->e, 1, 3)), 0);
}

/* Sessions: two attaches need two detaches; names, find and live flags follow. */
static void test_job_sessions(void **state)
{
	struct fx *f = *state;
	int a = dlshim_engine_job_attach(f->e, "alpha");
	assert_int_equal(a, 1);
	assert_int_equal(dlshim_engine_job_attach(f->e, "alpha"), a);
	assert_int_equal(dlshim_engine_njobs(f->e), 2);
	assert_string_equal(dlshim_engine_job_name(f->e, a), "alpha");
	assert_string_equal(dlshim_engine_job_name(f->e, f->job), "main");
	assert_null(dlshim_engine_job_name(f->e, 7));
	assert_null(dlshim_engine_job_name(f->e, -1));
	assert_int_equal(dlshim_engine_job_find(f->e, "alpha"), a);
	assert_int_equal(dlshim_engine_job_find(f->e, "beta"), -1);
	struct dlshim_file_id A = F(1);
	uint32_t ia = dlshim_engine_job_add_item(f->e, a, &A);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, ia), 1);
	dlshim_engine_job_detach(f->e, a);
	assert_true(dlshim_engine_job_live(f->e, a));
	assert_int_equal(dlshim_engine_item_refcnt(f->e, ia), 1);
	dlshim_engine_job_detach(f->e, a);
	assert_false(dlshim_engine_job_live(f->e, a));
	assert_int_equal(dlshim_engine_item_refcnt(f->e, ia), 0);
	dlshim_engine_job_detach(f->e, a); /* extra detach: harmless */
	dlshim_engine_job_detach(f->e, 99);
	dlshim_engine_job_detach(f->e, -1);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, ia), 0);
	/* A dead job's requests pass and are not counted. */
	struct dlshim_open_result r;
	open_x(f, a, &A, 0, &r, DLSHIM_OPEN_PASS);
	open_x(f, 40, &A, 0, &r, DLSHIM_OPEN_PASS);
	open_x(f, -1, &A, 0, &r, DLSHIM_OPEN_PASS);
	assert_int_equal(jstats(f, a).requests, 0);
	assert_int_equal(dlshim_engine_job_add_item(f->e, a, &A), ia);
	assert_int_equal(dlshim_engine_item_refcnt(f->e, ia), 0);
	/* Same name again: same id, live, one session. */
	assert_int_equal(dlshim_engine_job_attach(f->e, "alpha"), a);
	assert_true(dlshim_engine_job_live(f->e, a));
	dlshim_engine_job_detach(f->e, a);
	assert_false(dlshim_engine_job_live(f->e, a));
}

/* Job table: MAX_JOBS live jobs fit, one more is refused; an ended job's entry is reused. */
static void test_job_table_full(void **state)
{
	struct fx *f = *state;
	char name[32];
	for (int i = 1; i < DLSHIM_ENGINE_MAX_JOBS; i++) {
		snprintf(name, sizeof(name), "job%d", i);
		assert_int_equal(dlshim_engine_job_attach(f->e, name), i);
	}
	assert_int_equal(dlshim_engine_njobs(f->e), DLSHIM_ENGINE_MAX_JOBS);
	assert_int_equal(dlshim_engine_job_attach(f->e, "one-too-many"), -1);
	assert_int_equal(dlshim_engine_job_find(f->e, "one-too-many"), -1);
	/* An existing live job can still gain sessions. */
	assert_int_equal(dlshim_engine_job_attach(f->e, "job5"), 5);
	dlshim_engine_job_detach(f->e, 5);
	assert_true(dlshim_engine_job_live(f->e, 5));
	assert_int_equal(dlshim_engine_job_attach(f->e, "x"), -1);
	dlshim_engine_job_detach(f->e, 7);
	assert_false(dlshim_engine_job_live(f->e, 7));
	int n = dlshim_engine_job_attach(f->e, "newcomer");
	assert_int_equal(n, 7);
	assert_string_equal(dlshim_engine_job_name(f->e, 7), "newcomer");
	assert_int_equal(dlshim_engine_job_find(f->e, "job7"), -1);
	assert_int_equal(jstats(f, 7).requests, 0);
	assert_int_equal(dlshim_engine_job_attach(f->e, "again"), -1);
	assert_int_equal(dlshim_engine_njobs(f->e), DLSHIM_ENGINE_MAX_JOBS);
	/* The reused job works. */
	struct dlshim_file_id A = F(1);
	load_rel(f, n, &A);
	assert_int_equal(jstats(f, n).misses, 1);
}

/* ---- stats and accounting ----------------------------------------------- */

/* Requests, hits, misses, bytes from disk and from cache (via release), cache counters. */
static void test_stats(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id A = F(1), B = fid(2, 20000, 1);
	struct dlshim_cache_stats cs = cstats(f);
	assert_int_equal(cs.capacity_bytes, f->nblocks * BS);
	assert_int_equal(cs.capacity_bytes, 63 * BS);
	assert_int_equal(cs.used_bytes, 0);
	assert_int_equal(cs.items_known, 0);
	uint32_t s;
	uint64_t g = load_pinned(f, f->job, &A, &s, NULL);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, g, 0, 0), 0);
	load_rel(f, f->job, &B);
	struct dlshim_open_result r;
	open_x(f, f->job, &A, 0, &r, DLSHIM_OPEN_HIT);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, r.gen, FSZ, 0), 0);
	open_x(f, f->job, &A, 0, &r, DLSHIM_OPEN_HIT);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, r.gen, 1234, 5), 0);
	dlshim_engine_note_pass(f->e, f->job, 7);
	struct dlshim_job_stats st = jstats(f, f->job);
	assert_int_equal(st.requests, 4);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.misses, 2);
	assert_int_equal(st.waits, 0);
	assert_int_equal(st.passthrough, 0);
	assert_int_equal(st.bytes_from_disk, FSZ + 20000);
	assert_int_equal(st.bytes_from_cache, FSZ + 1234);
	assert_int_equal(st.bytes_passthrough, 12);
	assert_int_equal(st.files_loaded, 2);
	assert_int_equal(st.evictions, 0);
	cs = cstats(f);
	assert_int_equal(cs.used_bytes, (FBLK + 2) * BS);
	assert_int_equal(cs.items_resident, 2);
	assert_int_equal(cs.items_pinned, 0);
	assert_int_equal(cs.items_known, 2);
	assert_int_equal(cs.loads, 2);
	assert_int_equal(cs.evictions, 0);
	assert_int_equal(cs.stale_reloads, 0);
	assert_int_equal(cs.alloc_failures, 0);
	/* Row reads clients served through the index (3), two of them redirected. */
	dlshim_engine_note_rows(f->e, f->job, 3, 2);
	st = jstats(f, f->job);
	assert_int_equal(st.requests, 7);
	assert_int_equal(st.hits, 5);
	assert_int_equal(st.row_index_hits, 3);
	assert_int_equal(st.redirects, 2);
	/* Stats of an unknown job read as zeros. */
	st = jstats(f, 50);
	assert_int_equal(st.requests, 0);
	assert_int_equal(st.bytes_from_cache, 0);
	assert_true(dlshim_engine_segment_id(f->e) == f->v.hdr->segment_id);
}

/* A job that reads only HDF5 rows gets its epochs from its row mappings:
 * statistics per epoch, epochs completed; a mapping behind the job's
 * epoch changes nothing. */
static void test_rows_epochs(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id A = F(1), B = F(2);
	load_rel(f, f->job, &A);
	assert_int_equal(dlshim_engine_job_epoch_current(f->e, f->job), 0);
	dlshim_engine_job_rows_epoch(f->e, f->job, 1);
	load_rel(f, f->job, &B);
	dlshim_engine_job_rows_epoch(f->e, f->job, 1); /* the file's other mappings get there later */
	dlshim_engine_job_rows_epoch(f->e, f->job, 0);
	assert_int_equal(dlshim_engine_job_epoch_current(f->e, f->job), 1);
	assert_int_equal(jstats(f, f->job).epochs, 1);
	struct dlshim_epoch_stats es;
	assert_int_equal(dlshim_engine_job_epoch_stats(f->e, f->job, 0, &es), 0);
	assert_true(es.complete);
	assert_int_equal(es.requests, 1);
	assert_int_equal(es.bytes_from_disk, FSZ);
	assert_int_equal(dlshim_engine_job_epoch_stats(f->e, f->job, 1, &es), 0);
	assert_false(es.complete);
	assert_int_equal(es.requests, 1);
	assert_int_equal(dlshim_engine_job_epoch_stats(f->e, f->job, 2, &es), -1);
	/* Two epochs at once (a mapping that skipped one is impossible, but harmless). */
	dlshim_engine_job_rows_epoch(f->e, f->job, 3);
	assert_int_equal(jstats(f, f->job).epochs, 3);
	assert_int_equal(dlshim_engine_job_epoch_current(f->e, f->job), 3);
	/* An unknown or ended job: nothing. */
	dlshim_engine_job_rows_epoch(f->e, 50, 1);
	dlshim_engine_job_rows_epoch(f->e, -1, 1);
	assert_int_equal(jstats(f, 50).epochs, 0);
}

/* used_bytes returns to 0 once everything is evicted, failed or released (incl. orphans). */
static void test_used_bytes_back_to_zero(void **state)
{
	struct fx *f = *state;
	for (uint64_t i = 1; i <= 8; i++) {
		struct dlshim_file_id x = fid(i, i * 3000 + 1, 1);
		load_rel(f, f->job, &x);
	}
	/* An orphan: pinned old version of file 1 while a new version loads. */
	struct dlshim_file_id o1 = fid(1, 3001, 1), o2 = fid(1, 3001, 9);
	struct dlshim_open_result r1, r2;
	open_x(f, f->job, &o1, 0, &r1, DLSHIM_OPEN_HIT);
	open_x(f, f->job, &o2, 0, &r2, DLSHIM_OPEN_LOAD);
	assert_int_equal(dlshim_engine_load_done(f->e, f->job, r2.item, 0), 0);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r1.slot, r1.gen, 0, 0), 0);
	/* A file of the whole capacity evicts everything; its load then fails. */
	struct dlshim_file_id all = fid(100, f->nblocks * BS, 1);
	struct dlshim_open_result r;
	open_x(f, f->job, &all, 0, &r, DLSHIM_OPEN_LOAD);
	struct dlshim_cache_stats cs = cstats(f);
	assert_int_equal(cs.used_bytes, f->nblocks * BS);
	assert_int_equal(cs.evictions, 7);
	assert_int_equal(cs.items_resident, 1);
	assert_int_equal(dlshim_engine_load_done(f->e, f->job, r.item, 0), 0);
	cs = cstats(f);
	assert_int_equal(cs.used_bytes, 0);
	assert_int_equal(cs.items_resident, 0);
	assert_int_equal(cs.items_pinned, 0);
	for (uint64_t i = 1; i <= 8; i++)
		assert_false(resident(f, i));
	/* And the full cache is usable: the big file loads and reads back. */
	uint32_t s;
	uint64_t g = load_pinned(f, f->job, &all, &s, NULL);
	verify(f, s, g, &all);
	assert_int_equal(cstats(f).used_bytes, f->nblocks * BS);
	assert_int_equal(dlshim_engine_release(f->e, f->job, s, g, 0, 0), 0);
}

/* slot_iov covers exactly the item's bytes from `off`, block by block, honouring max. */
static void test_slot_iov(void **state)
{
	struct fx *f = *state;
	struct dlshim_file_id a = fid(1, 2 * BS + 100, 1);
	struct dlshim_open_result r;
	open_x(f, f->job, &a, 0, &r, DLSHIM_OPEN_LOAD);
	struct iovec iov[8];
	assert_int_equal(dlshim_engine_slot_iov(f->e, r.slot, 0, iov, 8), 3);
	assert_int_equal(iov[0].iov_len, BS);
	assert_int_equal(iov[1].iov_len, BS);
	assert_int_equal(iov[2].iov_len, 100);
	for (int i = 0; i < 3; i++) {
		uint8_t *p = iov[i].iov_base;
		assert_true(p >= f->v.data && p + iov[i].iov_len <= f->v.data + f->nblocks * BS);
		assert_int_equal((p - f->v.data) % BS, 0);
	}
	assert_int_equal(dlshim_engine_slot_iov(f->e, r.slot, 0, iov, 2), 2);
	assert_int_equal(dlshim_engine_slot_iov(f->e, r.slot, BS + 5, iov, 8), 2);
	assert_int_equal(iov[0].iov_len, BS - 5);
	assert_int_equal(iov[1].iov_len, 100);
	assert_int_equal(dlshim_engine_slot_iov(f->e, r.slot, 2 * BS + 99, iov, 8), 1);
	assert_int_equal(iov[0].iov_len, 1);
	assert_int_equal(dlshim_engine_slot_iov(f->e, r.slot, 2 * BS + 100, iov, 8), 0);
	assert_int_equal(dlshim_engine_slot_iov(f->e, r.slot, 0, iov, 0), 0);
	assert_int_equal(dlshim_engine_slot_iov(f->e, (uint32_t)f->v.hdr->nslots, 0, iov, 8), 0);
	fill(f, r.slot, &a);
	uint64_t g = dlshim_engine_load_done(f->e, f->job, r.item, 1);
	verify(f, r.slot, g, &a);
	assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, g, 0, 0), 0);
}

/* Loading all 63 one-block files, then 63 more, keeps every published item's bytes intact. */
static void test_churn_integrity(void **state)
{
	struct fx *f = *state;
	for (uint64_t round = 0; round < 4; round++)
		for (uint64_t i = 0; i < f->nblocks; i++) {
			struct dlshim_file_id x = fid(round * 1000 + i, (i * 37) % BS + 1, (int64_t)round);
			load_rel(f, f->job, &x);
		}
	struct dlshim_cache_stats cs = cstats(f);
	assert_int_equal(cs.items_resident, f->nblocks);
	assert_int_equal(cs.evictions, 3 * f->nblocks);
	for (uint64_t i = 0; i < f->nblocks; i++) {
		struct dlshim_file_id x = fid(3000 + i, (i * 37) % BS + 1, 3);
		struct dlshim_open_result r;
		open_x(f, f->job, &x, 0, &r, DLSHIM_OPEN_HIT);
		verify(f, r.slot, r.gen, &x);
		assert_int_equal(dlshim_engine_release(f->e, f->job, r.slot, r.gen, 0, 0), 0);
	}
}

int main(void)
{
#define T(fn, su) cmocka_unit_test_setup_teardown(fn, su, teardown)
	const struct CMUnitTest tests[] = {
		T(test_catalog_identity, setup_lru),
		T(test_hit_after_load, setup_lru),
		T(test_stale_mtime_orphan, setup_lru),
		T(test_stale_ctime, setup_lru),
		T(test_stale_size_unpinned, setup_lru),
		T(test_wait_while_loading, setup_lru),
		cmocka_unit_test(test_pass_too_big),
		T(test_pass_all_pinned, setup_lru),
		T(test_pass_no_slot, setup_lru),
		T(test_pins_block_eviction, setup_lru),
		T(test_release_wrong_gen, setup_lru),
		T(test_release_old_gen_after_reuse, setup_lru),
		T(test_failed_load, setup_lru),
		cmocka_unit_test(test_order_lru),
		cmocka_unit_test(test_order_fifo),
		cmocka_unit_test(test_order_refcnt_single),
		T(test_order_refcnt_jobs, setup_refcnt),
		cmocka_unit_test(test_order_random),
		T(test_refcnt_two_jobs, setup_refcnt),
		T(test_refcnt_open_undeclared, setup_refcnt),
		T(test_load_ahead, setup_refcnt),
		T(test_holds_and_spare_loads, setup_refcnt),
		T(test_job_sessions, setup_refcnt),
		T(test_job_table_full, setup_refcnt),
		T(test_stats, setup_lru),
		T(test_rows_epochs, setup_lru),
		T(test_used_bytes_back_to_zero, setup_lru),
		T(test_slot_iov, setup_lru),
		T(test_churn_integrity, setup_refcnt),
	};
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}
