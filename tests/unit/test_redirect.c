/* Unit tests for redirection (DESIGN.md "Semantics", redirect modes dir and
 * any), driving the engine directly the way the coordinator does: declare a
 * dataset (job_add_file with the coordinator's group keys "<dir>|<ext>" or
 * "<root>|<ext>", NULL for hidden files), dataset_done, then open requests in
 * seeded random orders, loading every chunk the engine asks for. */
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
#define NO DLSHIM_NO_ITEM

/* ---- seeded PRNG (splitmix64) --------------------------------------------- */

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint32_t rndn(uint64_t *s, uint32_t n) { return n ? (uint32_t)(rnd(s) % n) : 0; }

static void shuffle(uint32_t *a, uint32_t n, uint64_t *s)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = rndn(s, i);
		uint32_t t = a[i - 1];
		a[i - 1] = a[j];
		a[j] = t;
	}
}

/* ---- memory a failing test leaves behind --------------------------------
 * A failed assertion jumps out of the test; the teardown frees whatever the
 * test's helpers still hold, so valgrind and LeakSanitizer stay quiet. */

#define MAXREG 1024
static void *reg[MAXREG];
static int nreg;

static void *xrealloc(void *old, size_t n)
{
	void *p = realloc(old, n ? n : 1);
	assert_non_null(p);
	for (int i = 0; old && i < nreg; i++)
		if (reg[i] == old) {
			reg[i] = p;
			return p;
		}
	assert_true(nreg < MAXREG);
	reg[nreg++] = p;
	return p;
}

static void xfree(void *p)
{
	if (p == NULL)
		return;
	for (int i = 0; i < nreg; i++)
		if (reg[i] == p) {
			reg[i] = reg[--nreg];
			break;
		}
	free(p);
}

struct rig;
static void rig_free(struct rig *r);
static struct rig *rigs[16];
static int nrigs;

static int teardown(void **state)
{
	(void)state;
	while (nrigs)
		rig_free(rigs[nrigs - 1]);
	while (nreg)
		xfree(reg[nreg - 1]);
	return 0;
}

/* ---- a test dataset ------------------------------------------------------- */

static const char *const EXTS[] = {".jpg", ".png", ".txt"};

struct tfile {
	struct dlshim_file_id id;
	char path[96];
	char key[80];  /* group key given to the engine; "" = NULL (hidden) */
	uint32_t ext;  /* index in EXTS */
	uint32_t gid;  /* test-side id of `key`; NO for hidden files */
	uint8_t hidden;
	uint32_t item; /* engine item id */
};

struct ds {
	struct tfile *f;
	uint32_t n, cap;
	uint32_t ngroups;
	uint64_t bytes, blocks;
};

static uint64_t blocks_of(uint64_t size) { return size ? (size + BS - 1) / BS : 0; }

static struct tfile *ds_add(struct ds *d, uint64_t ino, uint64_t size, const char *path, const char *key,
			    uint32_t ext)
{
	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 256;
		d->f = xrealloc(d->f, d->cap * sizeof(*d->f));
		assert_non_null(d->f);
	}
	struct tfile *f = &d->f[d->n++];
	memset(f, 0, sizeof(*f));
	f->id = (struct dlshim_file_id){.dev = 1, .ino = ino, .size = size, .mtime_ns = 7};
	snprintf(f->path, sizeof(f->path), "%s", path);
	snprintf(f->key, sizeof(f->key), "%s", key ? key : "");
	const char *base = strrchr(path, '/');
	f->hidden = (base ? base[1] : path[0]) == '.';
	f->ext = ext;
	f->item = NO;
	f->gid = NO;
	d->bytes += size;
	d->blocks += blocks_of(size);
	return f;
}

/* Give every group key a dense test-side id. */
static void ds_index_groups(struct ds *d)
{
	d->ngroups = 0;
	for (uint32_t i = 0; i < d->n; i++) {
		struct tfile *f = &d->f[i];
		f->gid = NO;
		if (f->key[0] == 0)
			continue;
		for (uint32_t k = 0; k < i; k++)
			if (d->f[k].gid != NO && strcmp(d->f[k].key, f->key) == 0) {
				f->gid = d->f[k].gid;
				break;
			}
		if (f->gid == NO)
			f->gid = d->ngroups++;
	}
}

struct layout {
	uint32_t nroots, ndirs;  /* directories per root */
	uint32_t fmin, fmax;     /* files per directory and extension */
	uint32_t nexts;          /* extensions per directory (1..3) */
	uint32_t nhidden;        /* hidden files per directory */
	uint64_t smin, smax;     /* file sizes */
	int ext_one_key;         /* one key per directory for every extension
				  * (not the coordinator's keys: the engine's own
				  * extension check must keep them apart) */
};

/* The coordinator's scan: dir mode groups "<dir>|<ext>", any mode
 * "<root>|<ext>", hidden files no group. Inodes are shuffled so that the
 * engine's inode order is not the declaration order. */
static void ds_build(struct ds *d, const struct layout *L, enum dlshim_redirect mode, uint64_t *rng)
{
	memset(d, 0, sizeof(*d));
	for (uint32_t r = 0; r < L->nroots; r++)
		for (uint32_t dd = 0; dd < L->ndirs; dd++) {
			for (uint32_t x = 0; x < L->nexts; x++) {
				uint32_t nf = L->fmin + rndn(rng, L->fmax - L->fmin + 1);
				for (uint32_t k = 0; k < nf; k++) {
					char path[96], key[80];
					snprintf(path, sizeof(path), "/data/r%u/c%u/f%u%s", r, dd, k, EXTS[x]);
					if (L->ext_one_key)
						snprintf(key, sizeof(key), "/data/r%u/c%u", r, dd);
					else if (mode == DLSHIM_REDIRECT_ANY)
						snprintf(key, sizeof(key), "/data/r%u|%s", r, EXTS[x]);
					else
						snprintf(key, sizeof(key), "/data/r%u/c%u|%s", r, dd, EXTS[x]);
					uint64_t size = L->smin + rnd(rng) % (L->smax - L->smin + 1);
					ds_add(d, 0, size, path, key, x);
				}
			}
			for (uint32_t h = 0; h < L->nhidden; h++) {
				char path[96];
				snprintf(path, sizeof(path), "/data/r%u/c%u/.hidden%u.jpg", r, dd, h);
				ds_add(d, 0, L->smin + rnd(rng) % (L->smax - L->smin + 1), path, NULL, 0);
			}
		}
	uint32_t *ino = xrealloc(NULL, (d->n + 1) * sizeof(uint32_t));
	assert_non_null(ino);
	for (uint32_t i = 0; i < d->n; i++)
		ino[i] = 1000 + i;
	shuffle(ino, d->n, rng);
	for (uint32_t i = 0; i < d->n; i++)
		d->f[i].id.ino = ino[i];
	xfree(ino);
	ds_index_groups(d);
}

static void ds_free(struct ds *d)
{
	xfree(d->f);
	memset(d, 0, sizeof(*d));
}

/* ---- an engine with a coordinator-like driver ----------------------------- */

struct pend {
	int job;
	uint32_t item, slot;
};

struct rig {
	uint8_t *mem;
	size_t len;
	struct dlshim_engine *e;
	uint64_t cap;            /* capacity in bytes */
	struct pend *pend;       /* loads started and not yet done */
	uint32_t npend, pcap;
	uint64_t disk[DLSHIM_ENGINE_MAX_JOBS]; /* bytes this driver loaded per job */
	uint64_t rng;
	uint32_t defer_pct;      /* chance that a request's loads stay outstanding */
	uint32_t nowait_pct;     /* chance that a WAIT is given up (the coordinator's timeout) */
	uint64_t waits, passes, chunk_results, nowaits;
	uint32_t max_nload;
	int hold_pins;           /* the test holds pins of its own */
	struct dlshim_open_result res;
};

static struct rig *rig_new(uint64_t cache_bytes, enum dlshim_evict pol, uint64_t seed)
{
	struct rig *r = calloc(1, sizeof(*r));
	assert_non_null(r);
	uint64_t ns, nb;
	r->len = dlshim_shm_layout(cache_bytes, &ns, &nb);
	r->mem = aligned_alloc(4096, (r->len + 4095) / 4096 * 4096);
	assert_non_null(r->mem);
	memset(r->mem, 0, r->len);
	struct dlshim_engine_opts o = {.shm_base = r->mem, .shm_len = r->len, .evict = pol, .seed = seed};
	r->e = dlshim_engine_create(&o);
	assert_non_null(r->e);
	struct dlshim_cache_stats cs;
	dlshim_engine_cache_stats(r->e, &cs);
	r->cap = cs.capacity_bytes;
	assert_int_equal(r->cap, nb * BS);
	r->pcap = (uint32_t)ns + 1;
	r->pend = calloc(r->pcap, sizeof(*r->pend));
	assert_non_null(r->pend);
	r->rng = seed * 7919 + 1;
	assert_true(nrigs < 16);
	rigs[nrigs++] = r;
	return r;
}

static void rig_free(struct rig *r)
{
	if (r == NULL)
		return;
	for (int i = 0; i < nrigs; i++)
		if (rigs[i] == r) {
			rigs[i] = rigs[--nrigs];
			break;
		}
	dlshim_engine_destroy(r->e);
	free(r->mem);
	free(r->pend);
	free(r);
}

static struct dlshim_cache_stats cstats(struct rig *r)
{
	struct dlshim_cache_stats cs;
	dlshim_engine_cache_stats(r->e, &cs);
	return cs;
}

static struct dlshim_job_stats jstats(struct rig *r, int job)
{
	struct dlshim_job_stats st;
	dlshim_engine_job_stats(r->e, job, &st);
	return st;
}

/* Bytes of item `it` at offset `off`: distinct per item, cheap to write. */
static uint8_t pat(uint32_t it, uint64_t off) { return (uint8_t)(it * 37u + (uint32_t)(off >> 12) * 11u + 1u); }

static void slot_fill(struct rig *r, uint32_t slot, uint32_t it)
{
	uint64_t size = dlshim_engine_item_size(r->e, it), off = 0;
	while (off < size) {
		struct iovec iov[8];
		int n = dlshim_engine_slot_iov(r->e, slot, off, iov, 8);
		assert_true(n > 0);
		for (int i = 0; i < n; i++) {
			uint8_t *p = iov[i].iov_base;
			size_t len = iov[i].iov_len;
			while (len) {
				size_t run = 4096 - (off & 4095);
				if (run > len)
					run = len;
				memset(p, pat(it, off), run);
				p += run;
				off += run;
				len -= run;
			}
		}
	}
}

/* The slot holds the bytes of item `it` (sampled). */
static void slot_check(struct rig *r, uint32_t slot, uint32_t it)
{
	uint64_t size = dlshim_engine_item_size(r->e, it);
	uint64_t offs[3] = {0, size / 2, size ? size - 1 : 0};
	for (int k = 0; k < 3 && size; k++) {
		struct iovec iov[1];
		assert_int_equal(dlshim_engine_slot_iov(r->e, slot, offs[k], iov, 1), 1);
		if (((uint8_t *)iov[0].iov_base)[0] != pat(it, offs[k]))
			fail_msg("slot %u does not hold item %u at offset %llu", slot, it, (unsigned long long)offs[k]);
	}
}

static void load_finish(struct rig *r, struct pend p)
{
	uint64_t gen = dlshim_engine_load_done(r->e, p.job, p.item, 1);
	if (gen == 0 || (gen & 1))
		fail_msg("load_done of item %u gave generation %llu", p.item, (unsigned long long)gen);
	r->disk[p.job] += dlshim_engine_item_size(r->e, p.item);
	slot_check(r, p.slot, p.item);
	/* The served one's pin is the client's: it reads and closes at once. */
	assert_int_equal(dlshim_engine_release(r->e, p.job, p.slot, gen, 0, 0), 0);
}

static void rig_finish_all(struct rig *r)
{
	while (r->npend) {
		/* Finish in a random order, as concurrent loaders would. */
		uint32_t k = rndn(&r->rng, r->npend);
		struct pend p = r->pend[k];
		r->pend[k] = r->pend[--r->npend];
		load_finish(r, p);
	}
}

static void pend_add(struct rig *r, int job, uint32_t it, uint32_t slot)
{
	assert_true(r->npend < r->pcap);
	r->pend[r->npend++] = (struct pend){job, it, slot};
}

/* One request as the coordinator handles it; returns the served item.
 * Loads are done at once unless deferred (then finished later, or when the
 * engine answers WAIT). */
static uint32_t rig_open(struct rig *r, int job, const struct tfile *f)
{
	struct dlshim_open_result *res = &r->res;
	unsigned flags = 0;
	struct dlshim_cache_stats before;
	dlshim_engine_cache_stats(r->e, &before);
	for (int tries = 0;; tries++) {
		dlshim_engine_open(r->e, job, &f->id, flags, res);
		if (res->kind != DLSHIM_OPEN_WAIT)
			break;
		r->waits++;
		if (rndn(&r->rng, 100) < r->nowait_pct) {
			/* The coordinator waited too long: it asks again without
			 * waiting, and the client reads what the engine answers. */
			dlshim_engine_open(r->e, job, &f->id, DLSHIM_OPEN_F_RETRY | DLSHIM_OPEN_F_NOWAIT, res);
			if (res->kind == DLSHIM_OPEN_WAIT)
				fail_msg("%s: WAIT after DLSHIM_OPEN_F_NOWAIT", f->path);
			r->nowaits++;
			break;
		}
		/* WAIT is right only while a load is outstanding: after all are
		 * done, a second WAIT means an item is stuck loading. */
		if (r->npend == 0)
			fail_msg("%s: WAIT with no load outstanding (item %u stuck loading?)", f->path, res->item);
		rig_finish_all(r);
		flags = DLSHIM_OPEN_F_RETRY;
		assert_true(tries < 3);
	}
	uint32_t served = res->item;
	if (res->requested != f->item)
		fail_msg("%s: requested %u, want %u", f->path, res->requested, f->item);
	if (served == NO)
		fail_msg("%s: no served item", f->path);
	if (res->nload > r->max_nload)
		r->max_nload = res->nload;
	for (uint32_t i = 0; i < res->nload; i++) {
		slot_fill(r, res->load_slot[i], res->load_item[i]);
		pend_add(r, job, res->load_item[i], res->load_slot[i]);
	}
	/* The chunk sampler's loads ahead are spare: they evict nothing a
	 * live job still needs (that would be waste), so a request answered
	 * from memory adds no waste, whatever the other jobs' progress. */
	if (res->kind == DLSHIM_OPEN_HIT && res->ahead && dlshim_engine_job_sampler(r->e, job) == DLSHIM_SAMPLER_CHUNK) {
		struct dlshim_cache_stats after;
		dlshim_engine_cache_stats(r->e, &after);
		if (after.waste_bytes != before.waste_bytes)
			fail_msg("%s: a load ahead evicted %llu bytes some job still needed", f->path,
				 (unsigned long long)(after.waste_bytes - before.waste_bytes));
	}
	switch (res->kind) {
	case DLSHIM_OPEN_HIT:
		slot_check(r, res->slot, served);
		assert_int_equal(dlshim_engine_release(r->e, job, res->slot, res->gen, res->size, 0), 0);
		break;
	case DLSHIM_OPEN_LOAD: /* exact path (hidden or undeclared files) */
		if (res->nload != 0)
			fail_msg("%s: LOAD with a chunk list", f->path);
		slot_fill(r, res->slot, served);
		pend_add(r, job, served, res->slot);
		break;
	case DLSHIM_OPEN_LOAD_CHUNK:
		if (res->nload == 0)
			fail_msg("%s: LOAD_CHUNK with nothing to load", f->path);
		r->chunk_results++;
		break;
	case DLSHIM_OPEN_PASS:
		r->passes++;
		break;
	default:
		fail_msg("%s: open kind %d", f->path, res->kind);
	}
	if (rndn(&r->rng, 100) >= r->defer_pct)
		rig_finish_all(r);
	if (r->npend == 0 && r->hold_pins == 0) {
		/* Every load handed out is done and every pin dropped: nothing
		 * may stay pinned (a started load missing from a result would). */
		struct dlshim_cache_stats cs;
		dlshim_engine_cache_stats(r->e, &cs);
		if (cs.items_pinned != 0)
			fail_msg("%s: after open (kind %d, served %u, nload %u, first load %u) and all its loads, "
				 "%llu items still pinned",
				 f->path, res->kind, served, res->nload, res->nload ? res->load_item[0] : NO,
				 (unsigned long long)cs.items_pinned);
	}
	return served;
}

/* ---- a job running epochs over a dataset ---------------------------------- */

struct jrun {
	int job;
	struct ds *d;
	uint32_t *map;      /* engine item -> dataset index */
	uint32_t nmap;
	uint32_t *order, n; /* dataset indices, this epoch's request order */
	uint32_t pos, epoch, epochs;
	uint32_t *cnt;      /* per dataset index: times served this epoch */
	uint32_t *srv;      /* per dataset index: what its request was served */
	uint32_t *gsize, *gdone; /* per group: files, requests this epoch */
	uint64_t redirects, reopens;
	uint32_t reopen_pct;
	int has_hidden;
	uint64_t rng;
};

static void jrun_map(struct jrun *j)
{
	uint32_t max = 0;
	for (uint32_t i = 0; i < j->d->n; i++)
		if (j->d->f[i].item != NO && j->d->f[i].item + 1 > max)
			max = j->d->f[i].item + 1;
	xfree(j->map);
	j->map = xrealloc(NULL, (max + 1) * sizeof(uint32_t));
	assert_non_null(j->map);
	for (uint32_t i = 0; i <= max; i++)
		j->map[i] = NO;
	for (uint32_t i = 0; i < j->d->n; i++)
		if (j->d->f[i].item != NO)
			j->map[j->d->f[i].item] = i;
	j->nmap = max;
}

static void jrun_new_epoch(struct jrun *j)
{
	struct ds *d = j->d;
	j->n = d->n;
	j->order = xrealloc(j->order, (d->n + 1) * sizeof(uint32_t));
	j->cnt = xrealloc(j->cnt, (d->n + 1) * sizeof(uint32_t));
	j->srv = xrealloc(j->srv, (d->n + 1) * sizeof(uint32_t));
	j->gsize = xrealloc(j->gsize, (d->ngroups + 1) * sizeof(uint32_t));
	j->gdone = xrealloc(j->gdone, (d->ngroups + 1) * sizeof(uint32_t));
	memset(j->gsize, 0, (d->ngroups + 1) * sizeof(uint32_t));
	memset(j->gdone, 0, (d->ngroups + 1) * sizeof(uint32_t));
	j->has_hidden = 0;
	for (uint32_t i = 0; i < d->n; i++) {
		j->order[i] = i;
		j->cnt[i] = 0;
		j->srv[i] = NO;
		if (d->f[i].gid != NO)
			j->gsize[d->f[i].gid]++;
		else
			j->has_hidden = 1;
	}
	shuffle(j->order, j->n, &j->rng);
	j->pos = 0;
}

/* Declare the dataset for the job (as the coordinator does after a scan). */
static void jrun_declare(struct rig *r, struct jrun *j, enum dlshim_redirect mode, uint32_t chunk)
{
	for (uint32_t i = 0; i < j->d->n; i++) {
		struct tfile *f = &j->d->f[i];
		uint32_t it = dlshim_engine_job_add_file(r->e, j->job, &f->id, f->path, f->key[0] ? f->key : NULL);
		assert_true(it != NO);
		if (f->item != NO)
			assert_int_equal(it, f->item); /* a second job: same items */
		f->item = it;
	}
	dlshim_engine_job_dataset_done(r->e, j->job, mode, chunk);
	assert_true(dlshim_engine_job_has_dataset(r->e, j->job));
	jrun_map(j);
}

static void jrun_init(struct jrun *j, int job, struct ds *d, uint32_t epochs, uint64_t seed)
{
	memset(j, 0, sizeof(*j));
	j->job = job;
	j->d = d;
	j->epochs = epochs;
	j->rng = seed * 104729 + (uint64_t)job;
}

static void jrun_free(struct jrun *j)
{
	xfree(j->map);
	xfree(j->order);
	xfree(j->cnt);
	xfree(j->srv);
	xfree(j->gsize);
	xfree(j->gdone);
}

static uint32_t idx_of(struct jrun *j, uint32_t it)
{
	if (it >= j->nmap || j->map[it] == NO)
		fail_msg("served item %u is not in the dataset", it);
	return j->map[it];
}

/* Every file of the job's dataset was served exactly once this epoch, and
 * the job's counters agree with what the driver saw. */
static void jrun_check_epoch(struct rig *r, struct jrun *j, const char *what)
{
	struct ds *d = j->d;
	for (uint32_t i = 0; i < d->n; i++)
		if (j->cnt[i] != 1) {
			uint32_t twice = NO;
			for (uint32_t k = 0; k < d->n; k++)
				if (j->cnt[k] > 1 && d->f[k].gid == d->f[i].gid)
					twice = k;
			fail_msg("%s: job %d epoch %u: %s served %u times (group %s; %s served twice)", what, j->job,
				 j->epoch, d->f[i].path, j->cnt[i], d->f[i].key,
				 twice == NO ? "none" : d->f[twice].path);
		}
	struct dlshim_job_stats st = jstats(r, j->job);
	if (st.epochs != j->epoch + 1)
		fail_msg("%s: job %d: epochs stat %llu after %u epochs", what, j->job, (unsigned long long)st.epochs,
			 j->epoch + 1);
	if (st.redirects != j->redirects)
		fail_msg("%s: job %d: redirects stat %llu, driver saw %llu", what, j->job,
			 (unsigned long long)st.redirects, (unsigned long long)j->redirects);
	if (!j->has_hidden && st.bytes_consumed != (uint64_t)(j->epoch + 1) * d->bytes)
		fail_msg("%s: job %d: bytes_consumed %llu after %u epochs of %llu", what, j->job,
			 (unsigned long long)st.bytes_consumed, j->epoch + 1, (unsigned long long)d->bytes);
	if (st.bytes_from_disk != r->disk[j->job])
		fail_msg("%s: job %d: bytes_from_disk %llu, driver loaded %llu", what, j->job,
			 (unsigned long long)st.bytes_from_disk, (unsigned long long)r->disk[j->job]);
}

/* One request of the job's current epoch (plus maybe a re-open). Returns 0
 * when the job has run all its epochs. */
static int jrun_step(struct rig *r, struct jrun *j, const char *what)
{
	if (j->epoch >= j->epochs)
		return 0;
	if (j->pos == 0 && j->order == NULL)
		jrun_new_epoch(j);
	struct ds *d = j->d;
	uint32_t i = j->order[j->pos];
	struct tfile *f = &d->f[i];
	struct dlshim_job_stats before = jstats(r, j->job);
	uint32_t it = rig_open(r, j->job, f);
	uint32_t s = idx_of(j, it);
	struct tfile *sf = &d->f[s];
	if (f->gid == NO) {
		/* Hidden: no group, always served as itself. */
		if (s != i)
			fail_msg("%s: hidden %s served as %s", what, f->path, sf->path);
	} else {
		if (sf->hidden)
			fail_msg("%s: %s served as hidden %s", what, f->path, sf->path);
		if (sf->gid != f->gid || strcmp(sf->key, f->key) != 0)
			fail_msg("%s: %s (group %s) served as %s of group %s", what, f->path, f->key, sf->path, sf->key);
		if (sf->ext != f->ext)
			fail_msg("%s: %s served as %s: another extension", what, f->path, sf->path);
		j->gdone[f->gid]++;
	}
	if (s != i)
		j->redirects++;
	struct dlshim_job_stats after = jstats(r, j->job);
	if (after.redirects != before.redirects + (s != i))
		fail_msg("%s: %s served as %s: redirects %llu -> %llu", what, f->path, sf->path,
			 (unsigned long long)before.redirects, (unsigned long long)after.redirects);
	if (j->cnt[s] != 0) {
		uint32_t by = NO;
		for (uint32_t k = 0; k < j->pos; k++)
			if (j->srv[j->order[k]] == s)
				by = j->order[k];
		fail_msg("%s: job %d epoch %u request %u: %s served as %s (open kind %d, nload %u), already served "
			 "this epoch for %s",
			 what, j->job, j->epoch, j->pos, f->path, sf->path, r->res.kind, r->res.nload,
			 by == NO ? "?" : d->f[by].path);
	}
	j->cnt[s]++;
	j->srv[i] = s;
	/* A re-open of a path already requested this epoch, while its group's
	 * epoch is incomplete: same served file, nothing consumed. */
	if (j->reopen_pct && f->gid != NO && j->gdone[f->gid] < j->gsize[f->gid] &&
	    rndn(&j->rng, 100) < j->reopen_pct) {
		uint32_t k = rndn(&j->rng, j->pos + 1);
		while (d->f[j->order[k]].gid != f->gid)
			k++;
		uint32_t ri = j->order[k];
		struct dlshim_job_stats b2 = jstats(r, j->job);
		uint32_t it2 = rig_open(r, j->job, &d->f[ri]);
		struct dlshim_job_stats a2 = jstats(r, j->job);
		if (it2 != d->f[j->srv[ri]].item)
			fail_msg("%s: re-open of %s served %s, first open served %s", what, d->f[ri].path,
				 d->f[idx_of(j, it2)].path, d->f[j->srv[ri]].path);
		if (a2.bytes_consumed != b2.bytes_consumed || a2.redirects != b2.redirects)
			fail_msg("%s: re-open of %s consumed (bytes_consumed %llu -> %llu)", what, d->f[ri].path,
				 (unsigned long long)b2.bytes_consumed, (unsigned long long)a2.bytes_consumed);
		j->reopens++;
	}
	if (++j->pos == j->n) {
		jrun_check_epoch(r, j, what);
		j->epoch++;
		jrun_new_epoch(j);
	}
	return 1;
}

/* ---- the permutation and group guarantees, many configurations ------------ */

struct cfg {
	const char *name;
	enum dlshim_redirect mode;
	struct layout L;
	uint32_t chunk;      /* 0 = auto */
	uint32_t cache_pct;  /* cache as percent of the dataset's block footprint */
	uint32_t njobs;
	uint32_t epochs;
	uint32_t defer_pct, reopen_pct;
	enum dlshim_evict evict;
};

/* Sampler of the jobs run_cfg starts (test_permutation_dsa sets dsa). */
static enum dlshim_sampler cfg_sampler = DLSHIM_SAMPLER_CHUNK;
static uint32_t g_nowait_pct; /* set by test_permutation_wait_given_up */
static uint64_t g_nowaits;    /* how many given-up WAITs the runs saw */

struct outcome {
	uint64_t requests, redirects, reopens, waits, passes, evictions, waste, ahead;
	uint32_t chunk_files, max_nload;
};

static struct outcome run_cfg(const struct cfg *c, uint64_t seed)
{
	uint64_t rng = seed * 0x2545F4914F6CDD1DULL + 17;
	struct ds d;
	ds_build(&d, &c->L, c->mode, &rng);
	uint64_t cache = d.blocks * c->cache_pct / 100 * BS;
	if (cache < 4 * BS)
		cache = 4 * BS;
	struct rig *r = rig_new(cache, c->evict, seed);
	r->defer_pct = c->defer_pct;
	r->nowait_pct = g_nowait_pct;
	struct jrun jr[4];
	char what[160];
	snprintf(what, sizeof(what), "%s seed %llu", c->name, (unsigned long long)seed);
	assert_true(c->njobs >= 1 && c->njobs <= 4);
	for (uint32_t k = 0; k < c->njobs; k++) {
		char name[16];
		snprintf(name, sizeof(name), "job%u", k);
		int job = dlshim_engine_job_attach(r->e, name);
		assert_int_equal(job, (int)k);
		dlshim_engine_job_set_sampler(r->e, job, cfg_sampler);
		assert_int_equal(dlshim_engine_job_sampler(r->e, job), cfg_sampler);
		jrun_init(&jr[k], job, &d, c->epochs, seed);
		jr[k].reopen_pct = c->reopen_pct;
		jrun_declare(r, &jr[k], c->mode, c->chunk);
	}
	uint32_t chunk_files = cstats(r).chunk_files;
	if (c->chunk)
		assert_int_equal(chunk_files, c->chunk);
	else
		assert_true(chunk_files >= 1 && chunk_files <= 64);
	/* Interleave the jobs' requests at random. */
	for (;;) {
		uint32_t live[4], nl = 0;
		for (uint32_t k = 0; k < c->njobs; k++)
			if (jr[k].epoch < jr[k].epochs)
				live[nl++] = k;
		if (nl == 0)
			break;
		jrun_step(r, &jr[live[rndn(&rng, nl)]], what);
	}
	rig_finish_all(r);
	if (r->max_nload > chunk_files)
		fail_msg("%s: a chunk load of %u files, chunk is %u", what, r->max_nload, chunk_files);
	struct outcome o = {0};
	for (uint32_t k = 0; k < c->njobs; k++) {
		struct dlshim_job_stats st = jstats(r, jr[k].job);
		o.requests += st.requests;
		o.ahead += st.loads_ahead;
		o.redirects += jr[k].redirects;
		o.reopens += jr[k].reopens;
		assert_int_equal(st.epochs, c->epochs);
	}
	struct dlshim_cache_stats cs = cstats(r);
	assert_int_equal(cs.items_pinned, 0); /* every pin was given back */
	o.waits = r->waits;
	o.passes = r->passes;
	g_nowaits += r->nowaits;
	o.evictions = cs.evictions;
	o.waste = cs.waste_bytes;
	o.chunk_files = chunk_files;
	o.max_nload = r->max_nload;
	for (uint32_t k = 0; k < c->njobs; k++)
		jrun_free(&jr[k]);
	rig_free(r);
	ds_free(&d);
	return o;
}

static void run_cfgs(const struct cfg *cs, size_t n, uint32_t nseeds)
{
	for (size_t i = 0; i < n; i++)
		for (uint64_t s = 1; s <= nseeds; s++) {
			struct outcome o = run_cfg(&cs[i], s * 1000 + i);
			if (s == 1)
				print_message("  %-34s chunk %2u req %5llu redir %5llu reopen %4llu wait %3llu pass %3llu "
					      "evict %5llu waste %llu ahead %llu\n",
					      cs[i].name, o.chunk_files, (unsigned long long)o.requests,
					      (unsigned long long)o.redirects, (unsigned long long)o.reopens,
					      (unsigned long long)o.waits, (unsigned long long)o.passes,
					      (unsigned long long)o.evictions, (unsigned long long)o.waste,
					      (unsigned long long)o.ahead);
		}
}

#define SZ 1, 40000

/* Single job, dir and any, chunk sizes 1 / small / auto, cache larger and
 * smaller than the dataset: every epoch is a permutation of each group. */
static void test_permutation_single_job(void **state)
{
	(void)state;
	static const struct cfg cs[] = {
		{"dir auto, cache 2x", DLSHIM_REDIRECT_DIR, {1, 8, 5, 30, 1, 0, SZ, 0}, 0, 200, 1, 4, 0, 0, 0},
		{"dir auto, cache 1/3", DLSHIM_REDIRECT_DIR, {1, 8, 5, 30, 1, 0, SZ, 0}, 0, 33, 1, 4, 0, 0, 0},
		{"dir chunk 1, cache 1/3", DLSHIM_REDIRECT_DIR, {1, 8, 5, 30, 1, 0, SZ, 0}, 1, 33, 1, 4, 0, 0, 0},
		{"dir chunk 4, 2 exts, cache 1/4", DLSHIM_REDIRECT_DIR, {1, 6, 0, 20, 2, 0, SZ, 0}, 4, 25, 1, 3, 0, 0, 0},
		{"dir chunk 16 > cache", DLSHIM_REDIRECT_DIR, {1, 6, 10, 40, 1, 0, SZ, 0}, 16, 5, 1, 3, 0, 0, 0},
		{"any auto, cache 1/3", DLSHIM_REDIRECT_ANY, {1, 8, 5, 30, 1, 0, SZ, 0}, 0, 33, 1, 4, 0, 0, 0},
		{"any 2 roots chunk 16, cache 2x", DLSHIM_REDIRECT_ANY, {2, 4, 5, 25, 2, 0, SZ, 0}, 16, 200, 1, 3, 0, 0,
		 0},
		{"any chunk 1, cache 1/5", DLSHIM_REDIRECT_ANY, {1, 5, 5, 30, 1, 0, SZ, 0}, 1, 20, 1, 3, 0, 0, 0},
		{"dir lru chunk 8, cache 1/3", DLSHIM_REDIRECT_DIR, {1, 8, 5, 30, 1, 0, SZ, 0}, 8, 33, 1, 3, 0, 0,
		 DLSHIM_EVICT_LRU},
		{"dir random-evict auto, cache 1/2", DLSHIM_REDIRECT_DIR, {1, 8, 5, 30, 1, 0, SZ, 0}, 0, 50, 1, 3, 0, 0,
		 DLSHIM_EVICT_RANDOM},
	};
	run_cfgs(cs, sizeof(cs) / sizeof(cs[0]), 3);
}

/* Deferred loads (WAIT answers) and re-opens of already requested paths:
 * permutations still hold, a re-open gets the same file without consuming. */
static void test_permutation_deferred_and_reopen(void **state)
{
	(void)state;
	static const struct cfg cs[] = {
		{"dir defer+reopen auto, cache 1/3", DLSHIM_REDIRECT_DIR, {1, 8, 5, 30, 1, 0, SZ, 0}, 0, 33, 1, 4, 50,
		 30, 0},
		{"dir defer+reopen chunk 3, cache 2x", DLSHIM_REDIRECT_DIR, {1, 8, 5, 30, 1, 0, SZ, 0}, 3, 200, 1, 3, 50,
		 30, 0},
		{"any defer+reopen chunk 8, cache 1/4", DLSHIM_REDIRECT_ANY, {1, 6, 5, 30, 1, 0, SZ, 0}, 8, 25, 1, 3, 30,
		 30, 0},
		{"dir reopen chunk 1, cache 1/5", DLSHIM_REDIRECT_DIR, {1, 8, 5, 30, 1, 0, SZ, 0}, 1, 20, 1, 3, 0, 50, 0},
	};
	run_cfgs(cs, sizeof(cs) / sizeof(cs[0]), 3);
}

/* The coordinator gives up a WAIT after a while (a stalled loader) and asks
 * again with DLSHIM_OPEN_F_NOWAIT: the file the client then reads is the one
 * the engine recorded as served, so permutations still hold (before, the
 * client read its own file and a stand-in or nothing was consumed). */
static void test_permutation_wait_given_up(void **state)
{
	(void)state;
	static const struct cfg cs[] = {
		{"dir give-up auto, cache 1/3", DLSHIM_REDIRECT_DIR, {1, 8, 5, 30, 1, 0, SZ, 0}, 0, 33, 2, 4, 70, 20,
		 0},
		{"any give-up chunk 8, cache 1/4", DLSHIM_REDIRECT_ANY, {1, 6, 5, 30, 1, 0, SZ, 0}, 8, 25, 2, 3, 70, 20,
		 0},
	};
	g_nowait_pct = 50;
	g_nowaits = 0;
	run_cfgs(cs, sizeof(cs) / sizeof(cs[0]), 4);
	g_nowait_pct = 0;
	print_message("  given-up WAITs: %llu\n", (unsigned long long)g_nowaits);
	assert_true(g_nowaits > 0); /* the case was exercised */
}

/* Two jobs on one dataset, requests interleaved: each job's own epochs are
 * permutations of every group. */
static void test_permutation_two_jobs(void **state)
{
	(void)state;
	static const struct cfg cs[] = {
		{"2 jobs dir auto, cache 2x", DLSHIM_REDIRECT_DIR, {1, 6, 5, 30, 1, 0, SZ, 0}, 0, 200, 2, 3, 0, 0, 0},
		{"2 jobs dir auto, cache 1/3", DLSHIM_REDIRECT_DIR, {1, 6, 5, 30, 1, 0, SZ, 0}, 0, 33, 2, 3, 0, 0, 0},
		{"2 jobs any chunk 4, cache 1/3", DLSHIM_REDIRECT_ANY, {1, 6, 5, 30, 1, 0, SZ, 0}, 4, 33, 2, 3, 0, 0, 0},
		{"2 jobs dir chunk 1, cache 1/4", DLSHIM_REDIRECT_DIR, {1, 6, 5, 30, 1, 0, SZ, 0}, 1, 25, 2, 3, 0, 0, 0},
		{"3 jobs dir defer+reopen chunk 8", DLSHIM_REDIRECT_DIR, {1, 6, 5, 30, 1, 0, SZ, 0}, 8, 40, 3, 3, 40, 20,
		 0},
	};
	run_cfgs(cs, sizeof(cs) / sizeof(cs[0]), 3);
}

/* The shared sampler (DLSHIM_SAMPLER=dsa) under the same interleavings,
 * re-opens, deferred loads and small caches: every job's every group epoch
 * is still a permutation of the group, always served from the group. */
static void test_permutation_dsa(void **state)
{
	(void)state;
	static const struct cfg cs[] = {
		{"dsa 1 job dir, cache 1/3", DLSHIM_REDIRECT_DIR, {1, 6, 5, 30, 1, 0, SZ, 0}, 0, 33, 1, 3, 0, 0, 0},
		{"dsa 2 jobs dir, cache 1/3", DLSHIM_REDIRECT_DIR, {1, 6, 5, 30, 1, 0, SZ, 0}, 0, 33, 2, 3, 0, 0, 0},
		{"dsa 3 jobs any, cache 1/4, defer+reopen", DLSHIM_REDIRECT_ANY, {1, 6, 5, 30, 1, 0, SZ, 0}, 4, 25, 3, 3,
		 40, 20, 0},
		{"dsa 4 jobs dir x 3 exts, cache 2x", DLSHIM_REDIRECT_DIR, {1, 20, 1, 6, 3, 0, SZ, 0}, 0, 200, 4, 3, 20,
		 20, 0},
		{"dsa 2 jobs dir, tiny cache", DLSHIM_REDIRECT_DIR, {1, 4, 10, 40, 1, 0, SZ, 0}, 16, 8, 2, 3, 0, 0, 0},
	};
	cfg_sampler = DLSHIM_SAMPLER_DSA;
	run_cfgs(cs, sizeof(cs) / sizeof(cs[0]), 3);
	cfg_sampler = DLSHIM_SAMPLER_CHUNK;
}

/* Two jobs on one dataset, one twice as fast as the other, half the
 * dataset cached: files loaded from disk over both jobs' two epochs. */
static uint64_t two_speeds_loads(enum dlshim_sampler smp, enum dlshim_evict pol, uint64_t seed)
{
	uint64_t rng = seed * 0x2545F4914F6CDD1DULL + 5;
	static const struct layout L = {1, 4, 30, 30, 1, 0, SZ, 0};
	struct ds d;
	ds_build(&d, &L, DLSHIM_REDIRECT_DIR, &rng);
	struct rig *r = rig_new(d.blocks / 2 * BS, pol, seed);
	struct jrun jr[2];
	for (int k = 0; k < 2; k++) {
		int job = dlshim_engine_job_attach(r->e, k ? "slow" : "fast");
		dlshim_engine_job_set_sampler(r->e, job, smp);
		jrun_init(&jr[k], job, &d, 2, seed + (uint64_t)k);
		jrun_declare(r, &jr[k], DLSHIM_REDIRECT_DIR, 0);
	}
	for (uint32_t step = 0;; step++) {
		int a = jrun_step(r, &jr[0], "fast");
		int b = step % 2 ? jrun_step(r, &jr[1], "slow") : 1;
		if (!a && !b)
			break;
	}
	rig_finish_all(r);
	uint64_t loads = cstats(r).loads;
	for (int k = 0; k < 2; k++)
		jrun_free(&jr[k]);
	rig_free(r);
	ds_free(&d);
	return loads;
}

/* The shared sampler makes the slow job read what the fast one loaded, and
 * RefCnt keeps the draws queued for the slow job cached: two jobs x two
 * epochs of 120 files read far fewer than 480 files from disk, and fewer
 * than with LRU, which does not know what is queued. */
static void test_dsa_shares_loads(void **state)
{
	(void)state;
	uint64_t dsa = 0, lru = 0, chunk = 0;
	for (uint64_t seed = 1; seed <= 3; seed++) {
		dsa += two_speeds_loads(DLSHIM_SAMPLER_DSA, DLSHIM_EVICT_REFCNT, seed);
		lru += two_speeds_loads(DLSHIM_SAMPLER_DSA, DLSHIM_EVICT_LRU, seed);
		chunk += two_speeds_loads(DLSHIM_SAMPLER_CHUNK, DLSHIM_EVICT_REFCNT, seed);
	}
	print_message("files loaded over 3 seeds (of 3 x 480 read): dsa+refcnt %llu, dsa+lru %llu, chunk %llu\n",
		      (unsigned long long)dsa, (unsigned long long)lru, (unsigned long long)chunk);
	assert_true(dsa < 3 * 480 * 6 / 10);
	assert_true(dsa < lru);
}

/* Jobs leave a shared sampler at any time (one ends with draws still
 * queued, a third arrives mid-epoch): the others' epochs stay
 * permutations, and nothing stays pinned or counted for the ended job. */
static void test_dsa_job_end_and_late_start(void **state)
{
	(void)state;
	uint64_t rng = 77;
	static const struct layout L = {1, 3, 20, 20, 1, 0, SZ, 0};
	struct ds d;
	ds_build(&d, &L, DLSHIM_REDIRECT_DIR, &rng);
	struct rig *r = rig_new(d.blocks / 2 * BS, DLSHIM_EVICT_REFCNT, 9);
	struct jrun jr[3];
	const char *names[3] = {"a", "b", "late"};
	for (int k = 0; k < 3; k++) {
		int job = dlshim_engine_job_attach(r->e, names[k]);
		dlshim_engine_job_set_sampler(r->e, job, DLSHIM_SAMPLER_DSA);
		jrun_init(&jr[k], job, &d, 3, 9 + (uint64_t)k);
		if (k < 2)
			jrun_declare(r, &jr[k], DLSHIM_REDIRECT_DIR, 0);
	}
	for (int step = 0; step < 50; step++) {
		jrun_step(r, &jr[0], "a");
		jrun_step(r, &jr[1], "b");
	}
	rig_finish_all(r);
	dlshim_engine_job_detach(r->e, jr[1].job); /* b ends mid-epoch */
	jrun_declare(r, &jr[2], DLSHIM_REDIRECT_DIR, 0); /* late starts mid-epoch of a */
	for (;;) {
		int a = jrun_step(r, &jr[0], "a after b ended");
		int l = jrun_step(r, &jr[2], "late");
		if (!a && !l)
			break;
	}
	rig_finish_all(r);
	assert_int_equal(jstats(r, jr[0].job).epochs, 3);
	assert_int_equal(jstats(r, jr[2].job).epochs, 3);
	assert_int_equal(cstats(r).items_pinned, 0);
	/* b's refcounts are gone: every file is needed by a and late only */
	for (uint32_t i = 0; i < d.n; i++)
		assert_true(dlshim_engine_item_refcnt(r->e, d.f[i].item) <= 2);
	for (int k = 0; k < 3; k++)
		jrun_free(&jr[k]);
	rig_free(r);
	ds_free(&d);
}

/* Two jobs with a cache smaller than one chunk: partial chunk loads must not
 * break either job's permutation. */
static void test_permutation_two_jobs_tiny_cache(void **state)
{
	(void)state;
	static const struct cfg cs[] = {
		{"2 jobs dir chunk 16, cache < chunk", DLSHIM_REDIRECT_DIR, {1, 4, 10, 40, 1, 0, SZ, 0}, 16, 8, 2, 3, 0,
		 0, 0},
		{"2 jobs any chunk 32, cache < chunk", DLSHIM_REDIRECT_ANY, {1, 4, 10, 40, 1, 0, SZ, 0}, 32, 8, 2, 3, 30,
		 0, 0},
	};
	run_cfgs(cs, sizeof(cs) / sizeof(cs[0]), 3);
}

/* Groups of one file: nothing to redirect to, every file served as itself. */
static void test_groups_of_one(void **state)
{
	(void)state;
	static const struct cfg cs[] = {
		{"groups of 1, dir chunk 8", DLSHIM_REDIRECT_DIR, {1, 40, 1, 1, 1, 0, SZ, 0}, 8, 30, 1, 3, 0, 0, 0},
		{"groups of 1, any (1 file per root)", DLSHIM_REDIRECT_ANY, {30, 1, 1, 1, 1, 0, SZ, 0}, 0, 30, 1, 3, 30,
		 30, 0},
	};
	for (size_t i = 0; i < 2; i++)
		for (uint64_t s = 1; s <= 3; s++) {
			struct outcome o = run_cfg(&cs[i], s);
			assert_int_equal(o.redirects, 0);
		}
}

/* Groups smaller than a chunk (0..5 files per directory, chunk 8): a chunk
 * load never exceeds its group and the permutations hold. */
static void test_groups_smaller_than_chunk(void **state)
{
	(void)state;
	static const struct cfg cs[] = {
		{"groups 0..5, chunk 8, cache 1/3", DLSHIM_REDIRECT_DIR, {1, 30, 0, 5, 1, 0, SZ, 0}, 8, 33, 1, 3, 0, 0,
		 0},
		{"groups 1..3 x 3 exts, auto, cache 1/2", DLSHIM_REDIRECT_DIR, {1, 20, 1, 3, 3, 0, SZ, 0}, 0, 50, 1, 3,
		 20, 20, 0},
	};
	run_cfgs(cs, 2, 3);
	/* Direct check: every file of a 3-file group is loaded by one chunk load. */
	struct rig *r = rig_new(64 * BS, DLSHIM_EVICT_REFCNT, 5);
	int job = dlshim_engine_job_attach(r->e, "j");
	struct ds d;
	memset(&d, 0, sizeof(d));
	ds_add(&d, 11, 5000, "/d/a/x.jpg", "/d/a|.jpg", 0);
	ds_add(&d, 12, 6000, "/d/a/y.jpg", "/d/a|.jpg", 0);
	ds_add(&d, 13, 7000, "/d/a/z.jpg", "/d/a|.jpg", 0);
	ds_index_groups(&d);
	struct jrun j;
	jrun_init(&j, job, &d, 1, 1);
	jrun_declare(r, &j, DLSHIM_REDIRECT_DIR, 8);
	dlshim_engine_open(r->e, job, &d.f[1].id, 0, &r->res);
	assert_int_equal(r->res.kind, DLSHIM_OPEN_LOAD_CHUNK);
	assert_int_equal(r->res.nload, 3);
	assert_int_equal(r->res.item, d.f[1].item); /* the requested file itself when it is loaded */
	for (uint32_t i = 0; i < 3; i++) {
		slot_fill(r, r->res.load_slot[i], r->res.load_item[i]);
		load_finish(r, (struct pend){job, r->res.load_item[i], r->res.load_slot[i]});
	}
	jrun_free(&j);
	ds_free(&d);
	rig_free(r);
}

/* No files at all (an empty directory): declaring and opening other files
 * still works, served exactly, with no epoch counted. */
static void test_empty_dataset(void **state)
{
	(void)state;
	for (int mode = DLSHIM_REDIRECT_DIR; mode <= DLSHIM_REDIRECT_ANY; mode++) {
		struct rig *r = rig_new(32 * BS, DLSHIM_EVICT_REFCNT, 3);
		int job = dlshim_engine_job_attach(r->e, "empty");
		dlshim_engine_job_dataset_done(r->e, job, (enum dlshim_redirect)mode, 0);
		assert_true(dlshim_engine_job_has_dataset(r->e, job));
		assert_int_equal(jstats(r, job).epochs, 0);
		/* An undeclared file is served as itself. */
		struct ds d;
		memset(&d, 0, sizeof(d));
		struct tfile *f = ds_add(&d, 77, 3000, "/x/y.jpg", NULL, 0);
		f->item = NO;
		for (int k = 0; k < 3; k++) {
			dlshim_engine_open(r->e, job, &f->id, 0, &r->res);
			assert_true(r->res.kind == DLSHIM_OPEN_LOAD || r->res.kind == DLSHIM_OPEN_HIT);
			assert_int_equal(r->res.item, r->res.requested);
			if (r->res.kind == DLSHIM_OPEN_LOAD) {
				slot_fill(r, r->res.slot, r->res.item);
				load_finish(r, (struct pend){job, r->res.item, r->res.slot});
			} else {
				slot_check(r, r->res.slot, r->res.item);
				assert_int_equal(dlshim_engine_release(r->e, job, r->res.slot, r->res.gen, 0, 0), 0);
			}
		}
		assert_int_equal(jstats(r, job).epochs, 0);
		assert_int_equal(jstats(r, job).redirects, 0);
		dlshim_engine_job_detach(r->e, job);
		ds_free(&d);
		rig_free(r);
	}
}

/* A job with an empty dataset declared first must not fix the chunk size
 * for the jobs that come later: their auto chunk follows their files. */
static void test_empty_dataset_does_not_fix_chunk(void **state)
{
	(void)state;
	uint64_t cache = 64 * BS; /* 1 MiB */
	struct rig *r = rig_new(cache, DLSHIM_EVICT_REFCNT, 3);
	int e0 = dlshim_engine_job_attach(r->e, "empty");
	dlshim_engine_job_dataset_done(r->e, e0, DLSHIM_REDIRECT_DIR, 0);
	int job = dlshim_engine_job_attach(r->e, "real");
	struct ds d;
	memset(&d, 0, sizeof(d));
	uint64_t rng = 9;
	struct layout L = {1, 4, 20, 20, 1, 0, 20000, 20000, 0};
	ds_build(&d, &L, DLSHIM_REDIRECT_DIR, &rng);
	struct jrun j;
	jrun_init(&j, job, &d, 1, 1);
	jrun_declare(r, &j, DLSHIM_REDIRECT_DIR, 0);
	/* 1 MiB / (2 * 4 groups * 20000 B) = 6 files per chunk. */
	uint32_t want = dlshim_chunk_auto(r->cap, 4, 20000);
	assert_int_equal(want, 6);
	if (cstats(r).chunk_files != want)
		fail_msg("chunk_files %u after an empty dataset was declared first; auto for the real dataset is %u",
			 cstats(r).chunk_files, want);
	jrun_free(&j);
	ds_free(&d);
	rig_free(r);
}

/* Hidden files (no group): served as themselves, never served for another
 * path, in dir and any modes. */
static void test_hidden_files(void **state)
{
	(void)state;
	static const struct cfg cs[] = {
		{"dir hidden, chunk 4, cache 1/3", DLSHIM_REDIRECT_DIR, {1, 6, 3, 20, 1, 2, SZ, 0}, 4, 33, 1, 3, 0, 0,
		 0},
		{"any hidden, auto, cache 1/2", DLSHIM_REDIRECT_ANY, {1, 6, 3, 20, 1, 1, SZ, 0}, 0, 50, 1, 3, 30, 20, 0},
		{"2 jobs dir hidden, chunk 2", DLSHIM_REDIRECT_DIR, {1, 4, 3, 20, 1, 1, SZ, 0}, 2, 40, 2, 3, 0, 0, 0},
	};
	run_cfgs(cs, sizeof(cs) / sizeof(cs[0]), 3);
}

/* Hidden files are part of the job's dataset: each epoch consumes them once
 * like any other file (bytes_consumed over E epochs = E x dataset) and the
 * job needs them again (RefCnt 1) when a new epoch begins. */
static void test_hidden_files_every_epoch(void **state)
{
	(void)state;
	struct rig *r = rig_new(256 * BS, DLSHIM_EVICT_REFCNT, 3);
	int job = dlshim_engine_job_attach(r->e, "j");
	struct ds d;
	memset(&d, 0, sizeof(d));
	/* The coordinator puts a hidden file in a group of its own. */
	ds_add(&d, 21, 3000, "/d/a/.meta.jpg", "/d/a/.meta.jpg|hidden", 0);
	for (uint32_t k = 0; k < 6; k++) {
		char p[32];
		snprintf(p, sizeof(p), "/d/a/%u.jpg", k);
		ds_add(&d, 30 + k, 1000 + k, p, "/d/a|.jpg", 0);
	}
	ds_index_groups(&d);
	struct jrun j;
	jrun_init(&j, job, &d, 3, 1);
	jrun_declare(r, &j, DLSHIM_REDIRECT_DIR, 2);
	uint32_t hid = d.f[0].item;
	for (uint32_t e = 0; e < 3; e++) {
		/* The hidden file first in every epoch. */
		if (dlshim_engine_item_refcnt(r->e, hid) != 1)
			fail_msg("epoch %u: RefCnt of the hidden file %u before its request, want 1", e,
				 dlshim_engine_item_refcnt(r->e, hid));
		assert_int_equal(rig_open(r, job, &d.f[0]), hid);
		for (uint32_t k = 1; k < d.n; k++)
			rig_open(r, job, &d.f[k]);
		struct dlshim_job_stats st = jstats(r, job);
		assert_int_equal(st.epochs, e + 1);
		if (st.bytes_consumed != (e + 1) * d.bytes)
			fail_msg("after %u epochs bytes_consumed %llu, want %llu (hidden file %llu B not consumed again)",
				 e + 1, (unsigned long long)st.bytes_consumed, (unsigned long long)((e + 1) * d.bytes),
				 (unsigned long long)d.f[0].id.size);
	}
	jrun_free(&j);
	ds_free(&d);
	rig_free(r);
}

/* Files of different extensions in one directory are separate groups: with
 * the coordinator's keys, and even when given one key (the engine's own
 * extension check); a lone README.txt is always served as itself. */
static void test_extensions_separate(void **state)
{
	(void)state;
	static const struct cfg cs[] = {
		{"dir 3 exts coordinator keys", DLSHIM_REDIRECT_DIR, {1, 6, 1, 15, 3, 0, SZ, 0}, 4, 33, 1, 3, 0, 20, 0},
		{"any 3 exts coordinator keys", DLSHIM_REDIRECT_ANY, {1, 4, 1, 15, 3, 0, SZ, 0}, 0, 33, 1, 3, 20, 0, 0},
		{"dir 3 exts one key per dir", DLSHIM_REDIRECT_DIR, {1, 6, 1, 15, 3, 0, SZ, 1}, 4, 33, 1, 3, 0, 0, 0},
	};
	run_cfgs(cs, sizeof(cs) / sizeof(cs[0]), 3);

	struct rig *r = rig_new(64 * BS, DLSHIM_EVICT_REFCNT, 3);
	int job = dlshim_engine_job_attach(r->e, "j");
	struct ds d;
	memset(&d, 0, sizeof(d));
	ds_add(&d, 50, 900, "/d/a/README.txt", "/d/a|.txt", 2);
	for (uint32_t k = 0; k < 8; k++) {
		char p[32];
		snprintf(p, sizeof(p), "/d/a/%u.jpg", k);
		ds_add(&d, 40 + k, 5000, p, "/d/a|.jpg", 0);
	}
	ds_index_groups(&d);
	struct jrun j;
	jrun_init(&j, job, &d, 1, 1);
	jrun_declare(r, &j, DLSHIM_REDIRECT_DIR, 4);
	for (uint32_t e = 0; e < 3; e++) {
		for (uint32_t k = 1; k < d.n; k++)
			assert_int_not_equal(rig_open(r, job, &d.f[k]), d.f[0].item);
		assert_int_equal(rig_open(r, job, &d.f[0]), d.f[0].item);
	}
	jrun_free(&j);
	ds_free(&d);
	rig_free(r);
}

/* A re-open of the same path within an incomplete group epoch: the same
 * served file, bytes_consumed and redirects unchanged, also after the served
 * file was evicted in between. */
static void test_reopen_same_served(void **state)
{
	(void)state;
	struct rig *r = rig_new(6 * BS, DLSHIM_EVICT_REFCNT, 3); /* 6 one-block files */
	int job = dlshim_engine_job_attach(r->e, "j");
	struct ds d;
	memset(&d, 0, sizeof(d));
	for (uint32_t k = 0; k < 12; k++) {
		char p[32];
		snprintf(p, sizeof(p), "/d/a/%u.jpg", k);
		ds_add(&d, 100 + k, 4000 + k, p, "/d/a|.jpg", 0);
	}
	ds_index_groups(&d);
	struct jrun j;
	jrun_init(&j, job, &d, 1, 1);
	jrun_declare(r, &j, DLSHIM_REDIRECT_DIR, 3);
	/* Request the last files in inode order first: they get stand-ins. */
	uint32_t first[12];
	for (uint32_t k = 0; k < 11; k++) {
		uint32_t i = 11 - k;
		first[i] = rig_open(r, job, &d.f[i]);
		struct dlshim_job_stats b = jstats(r, job);
		/* Re-open this one and every earlier one. */
		for (uint32_t q = i; q < 12; q++) {
			uint32_t again = rig_open(r, job, &d.f[q]);
			if (again != first[q])
				fail_msg("re-open of %s: served item %u, first open served %u", d.f[q].path, again,
					 first[q]);
		}
		struct dlshim_job_stats a = jstats(r, job);
		assert_int_equal(a.bytes_consumed, b.bytes_consumed);
		assert_int_equal(a.redirects, b.redirects);
		assert_int_equal(a.requests, b.requests + (12 - i));
	}
	assert_true(jstats(r, job).redirects > 0);
	assert_true(cstats(r).evictions > 0); /* some re-opens were of evicted files */
	jrun_free(&j);
	ds_free(&d);
	rig_free(r);
}

/* Files added between epochs (job_add_file + dataset_done again): the next
 * epoch serves every file of the grown dataset exactly once, and the epoch
 * already completed stays counted. */
static void test_files_added_between_epochs(void **state)
{
	(void)state;
	struct rig *r = rig_new(256 * BS, DLSHIM_EVICT_REFCNT, 3);
	int job = dlshim_engine_job_attach(r->e, "j");
	struct ds d;
	uint64_t rng = 5;
	struct layout L = {1, 3, 4, 8, 1, 0, SZ, 0};
	ds_build(&d, &L, DLSHIM_REDIRECT_DIR, &rng);
	struct jrun j;
	jrun_init(&j, job, &d, 3, 1);
	jrun_declare(r, &j, DLSHIM_REDIRECT_DIR, 2);
	/* Epoch 1 on the initial dataset. */
	while (j.epoch < 1)
		jrun_step(r, &j, "before add");
	assert_int_equal(jstats(r, job).epochs, 1);
	/* One more file in an existing directory, one in a new directory. */
	ds_add(&d, 90001, 1234, "/data/r0/c0/new.jpg", "/data/r0/c0|.jpg", 0);
	ds_add(&d, 90002, 4321, "/data/r0/cnew/new.jpg", "/data/r0/cnew|.jpg", 0);
	ds_index_groups(&d);
	for (uint32_t i = d.n - 2; i < d.n; i++) {
		uint32_t it = dlshim_engine_job_add_file(r->e, job, &d.f[i].id, d.f[i].path, d.f[i].key);
		assert_true(it != NO);
		d.f[i].item = it;
	}
	dlshim_engine_job_dataset_done(r->e, job, DLSHIM_REDIRECT_DIR, 2);
	jrun_map(&j);
	uint64_t epochs_after_add = jstats(r, job).epochs;
	print_message("  epochs stat after 1 epoch and adding 2 files: %llu\n", (unsigned long long)epochs_after_add);
	jrun_new_epoch(&j); /* the next epoch's order includes the new files */
	/* bytes_consumed per epoch changes with the dataset: check the
	 * permutations only (jrun_check_epoch would compare totals). */
	uint64_t consumed0 = jstats(r, job).bytes_consumed;
	for (uint32_t e = 1; e < 3; e++) {
		for (uint32_t k = 0; k < j.n; k++) {
			uint32_t i = j.order[k];
			uint32_t s = idx_of(&j, rig_open(r, job, &d.f[i]));
			if (d.f[s].gid != d.f[i].gid)
				fail_msg("%s served as %s of another group", d.f[i].path, d.f[s].path);
			j.cnt[s]++;
		}
		if (j.cnt[d.n - 2] == 0 || j.cnt[d.n - 1] == 0)
			fail_msg("epoch %u: a file added after epoch 1 was not served (existing dir %u, new dir %u)", e + 1,
				 j.cnt[d.n - 2], j.cnt[d.n - 1]);
		for (uint32_t i = 0; i < d.n; i++)
			if (j.cnt[i] != 1)
				fail_msg("epoch %u after adding files: %s served %u times", e + 1, d.f[i].path, j.cnt[i]);
		if (epochs_after_add != 1)
			fail_msg("epochs stat went from 1 to %llu when files were added after the epoch",
				 (unsigned long long)epochs_after_add);
		assert_int_equal(jstats(r, job).epochs, e + 1);
		assert_int_equal(jstats(r, job).bytes_consumed, consumed0 + e * d.bytes);
		j.epoch++;
		jrun_new_epoch(&j);
	}
	jrun_free(&j);
	ds_free(&d);
	rig_free(r);
}

/* Waste: 0 when the cache holds the whole dataset; > 0 when files a live
 * job still needs are evicted; evictions of files no live job needs are no
 * waste. */
static void test_waste_accounting(void **state)
{
	(void)state;
	/* Cache larger than the dataset: no eviction, no waste, any mode, 1 or 2 jobs. */
	static const struct cfg big[] = {
		{"waste: dir cache 1.2x", DLSHIM_REDIRECT_DIR, {1, 6, 5, 25, 1, 0, SZ, 0}, 0, 120, 1, 3, 0, 0, 0},
		{"waste: any cache 1.2x", DLSHIM_REDIRECT_ANY, {1, 6, 5, 25, 1, 0, SZ, 0}, 4, 120, 1, 3, 0, 0, 0},
		{"waste: 2 jobs dir cache 1.2x", DLSHIM_REDIRECT_DIR, {1, 6, 5, 25, 1, 0, SZ, 0}, 0, 120, 2, 3, 30, 0,
		 0},
	};
	for (size_t i = 0; i < 3; i++) {
		struct outcome o = run_cfg(&big[i], 1);
		assert_int_equal(o.evictions, 0);
		assert_int_equal(o.waste, 0);
	}
	/* Cache too small for one chunk (one job; two jobs hit the bug of
	 * test_permutation_two_jobs_tiny_cache): loaded files still needed
	 * are evicted, waste. */
	struct cfg small = {"waste: chunk 32 cache 8%", DLSHIM_REDIRECT_DIR, {1, 6, 30, 40, 1, 0, SZ, 0}, 32, 8, 1,
			    3, 0, 0, 0};
	struct outcome o = run_cfg(&small, 1);
	print_message("  cache < chunk: waste %llu B, evictions %llu\n", (unsigned long long)o.waste,
		      (unsigned long long)o.evictions);
	assert_true(o.waste > 0);

	/* The same traffic with and without a live job needing the files. */
	for (int live = 0; live <= 1; live++) {
		struct rig *r = rig_new(8 * BS, DLSHIM_EVICT_REFCNT, 3);
		int reader = dlshim_engine_job_attach(r->e, "reader"); /* exact mode, no dataset */
		int other = dlshim_engine_job_attach(r->e, "other");
		struct ds d;
		memset(&d, 0, sizeof(d));
		for (uint32_t k = 0; k < 32; k++) {
			char p[32];
			snprintf(p, sizeof(p), "/d/a/%u.jpg", k);
			ds_add(&d, 200 + k, 10000, p, "/d/a|.jpg", 0);
		}
		ds_index_groups(&d);
		struct jrun j;
		jrun_init(&j, other, &d, 1, 1);
		jrun_declare(r, &j, DLSHIM_REDIRECT_DIR, 4);
		if (!live)
			dlshim_engine_job_detach(r->e, other);
		for (uint32_t k = 0; k < d.n; k++)
			assert_int_equal(rig_open(r, reader, &d.f[k]), d.f[k].item);
		struct dlshim_cache_stats cs = cstats(r);
		assert_true(cs.evictions >= 24);
		if (live)
			assert_int_equal(cs.waste_bytes, cs.evictions * 10000);
		else
			assert_int_equal(cs.waste_bytes, 0);
		jrun_free(&j);
		ds_free(&d);
		rig_free(r);
	}
}

/* dlshim_chunk_auto: cache / (2 * ngroups * mean) clamped to 1..64; and
 * dataset_done with chunk 0 sets cache_stats.chunk_files to it. */
static void test_chunk_auto(void **state)
{
	(void)state;
	const uint64_t M = 1024 * 1024;
	assert_int_equal(dlshim_chunk_auto(64 * M, 4, M), 8);
	assert_int_equal(dlshim_chunk_auto(64 * M, 1, M), 32);
	assert_int_equal(dlshim_chunk_auto(64 * M, 1, M / 2), 64);
	assert_int_equal(dlshim_chunk_auto(64 * M, 1, M / 8), 64);   /* clamped high */
	assert_int_equal(dlshim_chunk_auto(M, 1000, M), 1);          /* clamped low */
	assert_int_equal(dlshim_chunk_auto(0, 3, 1000), 1);
	assert_int_equal(dlshim_chunk_auto(10 * M, 0, M), 5);        /* 0 groups counts as 1 */
	assert_int_equal(dlshim_chunk_auto(100, 1, 0), 50);          /* mean 0 counts as 1 */
	assert_int_equal(dlshim_chunk_auto(1000 * 1000, 10, 7000), 7); /* 1e6 / 140000 = 7.14 */
	assert_int_equal(dlshim_chunk_auto(1000 * 1000, 10, 3000), 16);

	struct {
		uint64_t cache_blocks;
		struct layout L;
		enum dlshim_redirect mode;
	} v[] = {
		{64, {1, 4, 20, 20, 1, 0, 20000, 20000, 0}, DLSHIM_REDIRECT_DIR},
		{64, {1, 4, 20, 20, 1, 0, 20000, 20000, 0}, DLSHIM_REDIRECT_ANY},
		{1024, {1, 3, 10, 30, 1, 0, SZ, 0}, DLSHIM_REDIRECT_DIR},
		{8, {1, 40, 5, 5, 1, 0, SZ, 0}, DLSHIM_REDIRECT_DIR},
		{4096, {1, 1, 200, 200, 1, 0, 1000, 1000, 0}, DLSHIM_REDIRECT_ANY},
		{100, {2, 5, 1, 20, 2, 1, SZ, 0}, DLSHIM_REDIRECT_DIR},
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct rig *r = rig_new(v[i].cache_blocks * BS, DLSHIM_EVICT_REFCNT, 1);
		int job = dlshim_engine_job_attach(r->e, "j");
		struct ds d;
		uint64_t rng = 100 + i;
		ds_build(&d, &v[i].L, v[i].mode, &rng);
		assert_int_equal(cstats(r).chunk_files, 0); /* not set before a dataset */
		struct jrun j;
		jrun_init(&j, job, &d, 1, 1);
		jrun_declare(r, &j, v[i].mode, 0);
		/* The formula, independently: mean over grouped files. */
		uint64_t tot = 0, n = 0;
		for (uint32_t k = 0; k < d.n; k++)
			if (d.f[k].gid != NO) {
				tot += d.f[k].id.size;
				n++;
			}
		uint64_t k = r->cap / (2 * (d.ngroups ? d.ngroups : 1) * (n ? tot / n : 1));
		k = k < 1 ? 1 : k > 64 ? 64 : k;
		assert_int_equal(dlshim_chunk_auto(r->cap, d.ngroups, n ? tot / n : 1), k);
		if (cstats(r).chunk_files != k)
			fail_msg("layout %zu: chunk_files %u, auto formula gives %llu", i, cstats(r).chunk_files,
				 (unsigned long long)k);
		jrun_free(&j);
		ds_free(&d);
		rig_free(r);
	}
	/* An explicit chunk is used as given (at most DLSHIM_MAX_CHUNK). */
	uint32_t ks[] = {5, 1000};
	for (int i = 0; i < 2; i++) {
		struct rig *r = rig_new(64 * BS, DLSHIM_EVICT_REFCNT, 1);
		int job = dlshim_engine_job_attach(r->e, "j");
		struct ds d;
		uint64_t rng = 1;
		struct layout L = {1, 2, 3, 3, 1, 0, SZ, 0};
		ds_build(&d, &L, DLSHIM_REDIRECT_DIR, &rng);
		struct jrun j;
		jrun_init(&j, job, &d, 1, 1);
		jrun_declare(r, &j, DLSHIM_REDIRECT_DIR, ks[i]);
		assert_int_equal(cstats(r).chunk_files, ks[i] < DLSHIM_MAX_CHUNK ? ks[i] : DLSHIM_MAX_CHUNK);
		jrun_free(&j);
		ds_free(&d);
		rig_free(r);
	}
}

/* Stats on a small fixed case: epochs counts completed epochs (also while
 * the next one is under way), redirects counts served != requested. */
static void test_epochs_and_redirects_stats(void **state)
{
	(void)state;
	struct rig *r = rig_new(128 * BS, DLSHIM_EVICT_REFCNT, 3);
	int job = dlshim_engine_job_attach(r->e, "j");
	struct ds d;
	uint64_t rng = 77;
	struct layout L = {1, 3, 4, 4, 1, 0, SZ, 0};
	ds_build(&d, &L, DLSHIM_REDIRECT_DIR, &rng);
	struct jrun j;
	jrun_init(&j, job, &d, 4, 2);
	jrun_declare(r, &j, DLSHIM_REDIRECT_DIR, 2);
	assert_int_equal(jstats(r, job).epochs, 0);
	for (uint32_t e = 0; e < 4; e++) {
		for (uint32_t k = 0; k < d.n; k++) {
			assert_int_equal(jstats(r, job).epochs, e); /* not before the epoch is complete */
			jrun_step(r, &j, "stats");
		}
		assert_int_equal(jstats(r, job).epochs, e + 1);
	}
	assert_int_equal(jstats(r, job).redirects, j.redirects);
	assert_true(j.redirects > 0); /* chunk 2 over shuffled orders must redirect */
	assert_int_equal(jstats(r, job).requests, 4 * d.n);
	/* An ended job still reports what it did. */
	dlshim_engine_job_detach(r->e, job);
	assert_int_equal(jstats(r, job).epochs, 4);
	jrun_free(&j);
	ds_free(&d);
	rig_free(r);
}

/* I/O efficiency: cache half the dataset, one job, 3 epochs: bytes read
 * from disk at most 1.1x the dataset per epoch. */
static void test_io_efficiency(void **state)
{
	(void)state;
	for (int mode = DLSHIM_REDIRECT_DIR; mode <= DLSHIM_REDIRECT_ANY; mode++)
		for (uint64_t seed = 1; seed <= 3; seed++) {
			uint64_t rng = seed * 31;
			struct ds d;
			struct layout L = {1, 16, 20, 60, 1, 0, SZ, 0};
			ds_build(&d, &L, (enum dlshim_redirect)mode, &rng);
			/* Half the dataset's bytes as the cache (blocks round each
			 * file up, so it holds less than half of the files). */
			struct rig *r = rig_new(d.bytes / 2, DLSHIM_EVICT_REFCNT, seed);
			int job = dlshim_engine_job_attach(r->e, "j");
			struct jrun j;
			jrun_init(&j, job, &d, 3, seed);
			jrun_declare(r, &j, (enum dlshim_redirect)mode, 0);
			while (jrun_step(r, &j, "io"))
				;
			struct dlshim_job_stats st = jstats(r, job);
			double ratio = (double)st.bytes_from_disk / (3.0 * (double)d.bytes);
			print_message("  io %s seed %llu: %u files, %llu B, cache %llu B, chunk %u: disk/dataset per "
				      "epoch %.3f, waste %llu B\n",
				      mode == DLSHIM_REDIRECT_DIR ? "dir" : "any", (unsigned long long)seed, d.n,
				      (unsigned long long)d.bytes, (unsigned long long)r->cap, cstats(r).chunk_files,
				      ratio, (unsigned long long)cstats(r).waste_bytes);
			if (ratio > 1.1)
				fail_msg("bytes_from_disk %.3fx the dataset per epoch (> 1.1)", ratio);
			jrun_free(&j);
			ds_free(&d);
			rig_free(r);
		}
}

/* The randomness report. Exact mode: the served order is the request order
 * (displacement 0), shuffled requests give shuffle-like locality, class mix
 * and pair repeats. dir with small chunks and a cache of half the dataset:
 * served files leave their request positions, consecutive files of a group
 * come from one chunk far more often than in a shuffle, and classes stay as
 * mixed as the requests (dir keeps each file's class). */
static void test_order_report(void **state)
{
	(void)state;
	for (int mode = DLSHIM_REDIRECT_OFF; mode <= DLSHIM_REDIRECT_DIR; mode++) {
		uint64_t rng = 4242;
		struct ds d;
		struct layout L = {1, 8, 60, 60, 1, 0, SZ, 0};
		/* Exact jobs get the coordinator's root keys, dir jobs directory keys. */
		ds_build(&d, &L, mode == DLSHIM_REDIRECT_OFF ? DLSHIM_REDIRECT_ANY : DLSHIM_REDIRECT_DIR, &rng);
		struct rig *r = rig_new(d.bytes / 2, DLSHIM_EVICT_REFCNT, 5);
		int job = dlshim_engine_job_attach(r->e, "j");
		struct jrun j;
		jrun_init(&j, job, &d, 3, 9);
		jrun_declare(r, &j, (enum dlshim_redirect)mode, 8);
		while (jrun_step(r, &j, "order"))
			;
		for (uint32_t ep = 0; ep < 2; ep++) {
			struct dlshim_epoch_stats es;
			assert_int_equal(dlshim_engine_job_epoch_stats(r->e, job, ep, &es), 0);
			const struct dlshim_order_stats *o = &es.order;
			print_message("  order %s epoch %u: n %u displacement %.3f locality %.3f (%.3f) pair repeat "
				      "%.3f (%.3f) class mix %.3f\n",
				      mode == DLSHIM_REDIRECT_OFF ? "exact" : "dir", ep, o->n, o->displacement,
				      o->locality, o->locality_shuffle, o->pair_repeat, o->pair_repeat_shuffle,
				      o->class_mix);
			/* A job epoch starts when its first group rolls over, so
			 * a redirect epoch's report covers about one dataset. */
			if (mode == DLSHIM_REDIRECT_OFF)
				assert_int_equal(o->n, d.n);
			else
				assert_true(o->n > d.n * 9 / 10 && o->n < d.n * 11 / 10);
			assert_int_equal(o->has_prev, ep > 0);
			assert_true(o->class_mix > 0.85 && o->class_mix < 1.15);
			assert_true(o->locality_shuffle > 0 && o->locality_shuffle < 0.2);
			if (mode == DLSHIM_REDIRECT_OFF) {
				assert_true(o->displacement == 0);
				assert_true(o->locality < o->locality_shuffle * 2 + 0.02);
				if (ep > 0)
					assert_true(o->pair_repeat < o->pair_repeat_shuffle * 3 + 0.02);
			} else {
				assert_true(o->displacement > 0.05);
				assert_true(o->locality > 3 * o->locality_shuffle);
			}
		}
		/* The running epoch has no order report yet. */
		struct dlshim_epoch_stats cur;
		if (dlshim_engine_job_epoch_stats(r->e, job, dlshim_engine_job_epoch_current(r->e, job), &cur) == 0)
			assert_int_equal(cur.complete ? 1 : cur.order.n, cur.complete ? 1 : 0);
		jrun_free(&j);
		ds_free(&d);
		rig_free(r);
	}
}

/* When a chunk load stops part-way (no space) and the request falls back to
 * loading the requested file alone, the files the chunk did start are still
 * handed to the caller: none is left loading with nobody to finish it. */
static void test_partial_chunk_loads_handed_over(void **state)
{
	(void)state;
	struct rig *r = rig_new(8 * BS, DLSHIM_EVICT_REFCNT, 3);
	int a = dlshim_engine_job_attach(r->e, "a");
	int b = dlshim_engine_job_attach(r->e, "b");
	int c = dlshim_engine_job_attach(r->e, "filler"); /* exact mode, holds pins */
	struct ds d;
	memset(&d, 0, sizeof(d));
	/* Inode order x, y, q: one chunk of 3. x 1 block, y 3 blocks, q 1 block. */
	struct tfile *x = ds_add(&d, 1, 1000, "/d/a/x.jpg", "/d/a|.jpg", 0);
	ds_add(&d, 2, 40000, "/d/a/y.jpg", "/d/a|.jpg", 0);
	ds_add(&d, 3, 1000, "/d/a/q.jpg", "/d/a|.jpg", 0);
	ds_index_groups(&d);
	x = &d.f[0];
	struct tfile *q = &d.f[2];
	struct jrun ja;
	jrun_init(&ja, a, &d, 1, 1);
	jrun_declare(r, &ja, DLSHIM_REDIRECT_DIR, 3);
	uint32_t xi = dlshim_engine_job_add_file(r->e, b, &x->id, x->path, x->key); /* b needs x only */
	dlshim_engine_job_dataset_done(r->e, b, DLSHIM_REDIRECT_DIR, 3);
	/* Fill the cache with pinned one-block files. */
	uint32_t fslot[8];
	uint64_t fgen[8];
	for (int k = 0; k < 8; k++) {
		struct dlshim_file_id id = {1, 500 + (uint64_t)k, 100, 7, 0};
		dlshim_engine_open(r->e, c, &id, 0, &r->res);
		assert_int_equal(r->res.kind, DLSHIM_OPEN_LOAD);
		fslot[k] = r->res.slot;
		slot_fill(r, fslot[k], r->res.item);
		fgen[k] = dlshim_engine_load_done(r->e, c, r->res.item, 1);
		assert_true(fgen[k] != 0);
	}
	/* a asks for x: nothing fits, served x by passthrough (consumed). */
	dlshim_engine_open(r->e, a, &x->id, 0, &r->res);
	assert_int_equal(r->res.kind, DLSHIM_OPEN_PASS);
	assert_int_equal(r->res.item, xi);
	assert_int_equal(r->res.nload, 0);
	/* Two blocks become free. */
	for (int k = 0; k < 2; k++)
		assert_int_equal(dlshim_engine_release(r->e, c, fslot[k], fgen[k], 0, 0), 0);
	/* a asks for q: the chunk starts x (b needs it), y does not fit. */
	dlshim_engine_open(r->e, a, &q->id, 0, &r->res);
	print_message("  partial chunk: kind %d item %u nload %u first %u; x loading=%d pins %u\n", r->res.kind,
		      r->res.item, r->res.nload, r->res.nload ? r->res.load_item[0] : NO,
		      !dlshim_engine_item_resident(r->e, xi) && dlshim_engine_item_pins(r->e, xi) > 0,
		      dlshim_engine_item_pins(r->e, xi));
	assert_int_equal(r->res.item, q->item);
	int x_listed = 0;
	for (uint32_t i = 0; i < r->res.nload; i++) {
		x_listed |= r->res.load_item[i] == xi;
		slot_fill(r, r->res.load_slot[i], r->res.load_item[i]);
		load_finish(r, (struct pend){a, r->res.load_item[i], r->res.load_slot[i]});
	}
	if (r->res.kind == DLSHIM_OPEN_HIT)
		assert_int_equal(dlshim_engine_release(r->e, a, r->res.slot, r->res.gen, 0, 0), 0);
	/* Every pin but the 6 fillers' was given back; x is not stuck loading. */
	if (!x_listed && dlshim_engine_item_pins(r->e, xi) > 0)
		fail_msg("item x was started loading by the chunk but is not in the result's load list "
			 "(nload %u): it stays loading with a pin nobody will drop",
			 r->res.nload);
	assert_int_equal(cstats(r).items_pinned, 6);
	/* b can get x. */
	dlshim_engine_open(r->e, b, &x->id, 0, &r->res);
	assert_int_not_equal(r->res.kind, DLSHIM_OPEN_WAIT);
	jrun_free(&ja);
	ds_free(&d);
	rig_free(r);
}

/* A bare 4 MiB RefCnt engine for tests that declare their own files;
 * free with dlshim_engine_destroy(e) and free(*mem). */
static struct dlshim_engine *small_engine(void **mem)
{
	size_t len = 4u << 20;
	*mem = aligned_alloc(4096, len);
	assert_non_null(*mem);
	struct dlshim_engine_opts o = {.shm_base = *mem, .shm_len = len, .evict = DLSHIM_EVICT_REFCNT, .seed = 1};
	struct dlshim_engine *e = dlshim_engine_create(&o);
	assert_non_null(e);
	return e;
}

/* Remote prefetch candidates (dlshim_engine_group_absent): only absent,
 * unread members of the request's group that the filter accepts, never the
 * request itself, at most `max`; each gets a slot and is then served by
 * the group's next requests without a new load. */
static int even_ino(void *ctx, uint32_t item)
{
	struct dlshim_engine *e = ctx;
	struct dlshim_file_id id;
	return dlshim_engine_item_id(e, item, &id) == 0 && id.ino % 2 == 0;
}

static void test_group_absent_for_prefetch(void **state)
{
	(void)state;
	void *mem;
	struct dlshim_engine *e = small_engine(&mem);
	int j = dlshim_engine_job_attach(e, "dir");
	struct dlshim_file_id ids[16];
	char path[64], key[64];
	for (int i = 0; i < 16; i++) {
		ids[i] = (struct dlshim_file_id){7, 100 + (uint64_t)i, 1000, 5, 0};
		snprintf(path, sizeof(path), "/r/c%d/f%d.jpg", i % 2, i);
		snprintf(key, sizeof(key), "d:/r/c%d|.jpg", i % 2);
		dlshim_engine_job_add_file(e, j, &ids[i], path, key);
	}
	dlshim_engine_job_dataset_done(e, j, DLSHIM_REDIRECT_DIR, 16);
	uint32_t req = dlshim_engine_find_item(e, 7, 100); /* group c0: inodes 100, 102, ..., 114 */
	uint32_t items[16], slots[16];
	/* An unknown request gets nothing. */
	assert_int_equal(dlshim_engine_group_absent(e, j, 9999, even_ino, e, items, slots, 16), 0);
	uint32_t n = dlshim_engine_group_absent(e, j, req, even_ino, e, items, slots, 3);
	assert_int_equal(n, 3);
	for (uint32_t k = 0; k < n; k++) {
		struct dlshim_file_id id;
		assert_int_equal(dlshim_engine_item_id(e, items[k], &id), 0);
		assert_true(items[k] != req);
		assert_int_equal(id.ino % 2, 0); /* same group (c0) and accepted by the filter */
		for (uint32_t m = 0; m < k; m++)
			assert_true(items[m] != items[k]);
		uint64_t g = dlshim_engine_load_done(e, j, items[k], 1);
		assert_true(g != 0);
		dlshim_engine_release(e, j, slots[k], g, 0, 0);
	}
	/* The rest of the group: 8 members - request - 3 taken = 4 absent. */
	n = dlshim_engine_group_absent(e, j, req, even_ino, e, items + 3, slots + 3, 16);
	assert_int_equal(n, 4);
	for (uint32_t k = 3; k < 7; k++)
		assert_int_equal(dlshim_engine_load_done(e, j, items[k], 0), 0); /* given back unloaded */
	/* The three resident ones serve the group's next requests with no load. */
	for (int k = 0; k < 3; k++) {
		struct dlshim_open_result res;
		dlshim_engine_open(e, j, &ids[2 + 2 * k], 0, &res);
		assert_int_equal(res.kind, DLSHIM_OPEN_HIT); /* resident: no load needed to serve */
		int found = 0;
		for (int m = 0; m < 3; m++)
			found |= res.item == items[m];
		assert_true(found);
		for (uint32_t m = 0; m < res.nload; m++) /* load-ahead of the rest: give it back */
			dlshim_engine_load_done(e, j, res.load_item[m], 0);
		dlshim_engine_release(e, j, res.slot, res.gen, 1000, 0);
	}
	/* Read ones are never candidates again this epoch. */
	n = dlshim_engine_group_absent(e, j, req, even_ino, e, items, slots, 16);
	for (uint32_t k = 0; k < n; k++) {
		dlshim_engine_load_done(e, j, items[k], 0);
	}
	assert_int_equal(n, 4);
	dlshim_engine_job_detach(e, j);
	dlshim_engine_destroy(e);
	free(mem);
}

/* A file belongs to one group of each kind: an exact (root-grouped) job that
 * declared the files first must not make a dir job redirect across
 * directories (found by the coordinator's TSan integration run). */
static void test_group_kinds_do_not_mix(void **state)
{
	(void)state;
	void *mem;
	struct dlshim_engine *e = small_engine(&mem);
	int jx = dlshim_engine_job_attach(e, "exact"), jd = dlshim_engine_job_attach(e, "dir");
	struct dlshim_file_id ids[16];
	char path[64], key[64];
	for (int pass = 0; pass < 2; pass++) {
		int job = pass ? jd : jx;
		for (int i = 0; i < 16; i++) {
			ids[i] = (struct dlshim_file_id){7, 100 + (uint64_t)i, 1000, 5, 0};
			snprintf(path, sizeof(path), "/r/c%d/f%d.jpg", i % 2, i);
			if (pass)
				snprintf(key, sizeof(key), "d:/r/c%d|.jpg", i % 2);
			else
				snprintf(key, sizeof(key), "r:/r|.jpg");
			dlshim_engine_job_add_file(e, job, &ids[i], path, key);
		}
		dlshim_engine_job_dataset_done(e, job, pass ? DLSHIM_REDIRECT_DIR : DLSHIM_REDIRECT_OFF, 4);
	}
	for (int epoch = 0; epoch < 3; epoch++) {
		int seen[16] = {0};
		for (int k = 0; k < 16; k++) {
			int i = (k * 5 + epoch) % 16;
			struct dlshim_open_result res;
			dlshim_engine_open(e, jd, &ids[i], 0, &res);
			for (uint32_t n = 0; n < res.nload; n++) {
				uint64_t g = dlshim_engine_load_done(e, jd, res.load_item[n], 1);
				if (res.load_item[n] == res.item && res.kind == DLSHIM_OPEN_LOAD_CHUNK) {
					res.gen = g;
					res.slot = res.load_slot[n];
					res.kind = DLSHIM_OPEN_HIT;
				} else {
					dlshim_engine_release(e, jd, res.load_slot[n], g, 0, 0);
				}
			}
			assert_int_equal(res.kind, DLSHIM_OPEN_HIT);
			const char *sp = dlshim_engine_item_path(e, res.item);
			snprintf(path, sizeof(path), "/r/c%d/", i % 2);
			if (strncmp(sp, path, strlen(path)) != 0)
				fail_msg("epoch %d: /r/c%d/f%d.jpg served as %s (another directory)", epoch, i % 2, i, sp);
			uint32_t base = dlshim_engine_find_item(e, 7, 100); /* items were created in order */
			assert_true(res.item >= base && res.item < base + 16);
			seen[res.item - base]++;
			dlshim_engine_release(e, jd, res.slot, res.gen, 0, 0);
		}
		for (int i = 0; i < 16; i++)
			assert_int_equal(seen[i], 1);
	}
	dlshim_engine_destroy(e);
	free(mem);
}


/* A served file that cannot be delivered (its load fails: a remote file
 * whose home node died, a stand-in that vanished) is forgotten and the
 * request decided again, as the coordinator does: the failed file stays
 * consumed for the group epoch, the request gets another unconsumed file
 * of its group, and no file is delivered twice in a group epoch. Requests
 * per epoch are the live files' count (pigeonhole: more requests than live
 * files must repeat one). */
static int broken_file(int i) { return i == 4 || i == 6 || i == 11; }

static void test_redecide_after_failed_load(void **state)
{
	(void)state;
	void *mem;
	struct dlshim_engine *e = small_engine(&mem);
	int jd = dlshim_engine_job_attach(e, "dir"), jx = dlshim_engine_job_attach(e, "exact");
	struct dlshim_file_id ids[16];
	uint32_t item[16];
	char path[64], key[64];
	for (int i = 0; i < 16; i++) {
		ids[i] = (struct dlshim_file_id){7, 100 + (uint64_t)i, 1000, 5, 0};
		snprintf(path, sizeof(path), "/r/c%d/f%d.jpg", i % 2, i);
		snprintf(key, sizeof(key), "d:/r/c%d|.jpg", i % 2);
		item[i] = dlshim_engine_job_add_file(e, jd, &ids[i], path, key);
	}
	dlshim_engine_job_dataset_done(e, jd, DLSHIM_REDIRECT_DIR, 4);
	/* Exact mode has no decision to drop. */
	struct dlshim_file_id xid = {8, 1, 1000, 5, 0};
	dlshim_engine_job_add_file(e, jx, &xid, "/x/a.jpg", NULL);
	dlshim_engine_job_dataset_done(e, jx, DLSHIM_REDIRECT_OFF, 4);
	struct dlshim_open_result res;
	dlshim_engine_open(e, jx, &xid, 0, &res);
	uint32_t xit = res.item;
	if (res.kind == DLSHIM_OPEN_LOAD) {
		dlshim_engine_load_done(e, jx, xit, 0);
	}
	assert_int_equal(dlshim_engine_forget_served(e, jx, xit), 0);

	/* First 13 requests, as many as live files: six in c0 (live 0 2 8 10
	 * 12 14; 4 and 6 broken) and seven in c1 (live all but 11), naming
	 * broken files too; then the three names left (the group epochs roll
	 * over once their broken files have failed). */
	const uint32_t req0[] = {0, 2, 4, 6, 8, 10}, req1[] = {1, 3, 5, 7, 9, 11, 13}, rest[] = {12, 14, 15};
	uint64_t seed = 42, failures = 0;
	uint32_t order[16];
	for (int k = 0; k < 6; k++)
		order[k] = req0[k];
	for (int k = 0; k < 7; k++)
		order[6 + k] = req1[k];
	shuffle(order, 13, &seed);
	for (int k = 0; k < 3; k++)
		order[13 + k] = rest[k];
	int seen[16] = {0}, later[16] = {0};
	for (int k = 0; k < 16; k++) {
		int i = (int)order[k], delivered = -1;
		uint32_t failed = NO;
		for (int attempt = 0; attempt < 8 && delivered < 0; attempt++) {
			dlshim_engine_open(e, jd, &ids[i], attempt ? DLSHIM_OPEN_F_RETRY : 0, &res);
			assert_int_not_equal(res.kind, DLSHIM_OPEN_WAIT);
			int f = (int)(res.item - item[0]);
			assert_true(f >= 0 && f < 16);
			assert_int_equal(f % 2, i % 2); /* same directory */
			if (failed != NO)
				assert_int_not_equal(res.item, failed);
			int ok = !broken_file(f);
			for (uint32_t n = 0; n < res.nload; n++) {
				int lf = (int)(res.load_item[n] - item[0]);
				uint64_t g = dlshim_engine_load_done(e, jd, res.load_item[n], !broken_file(lf));
				if (g)
					dlshim_engine_release(e, jd, res.load_slot[n], g, 0, 0);
			}
			if (res.kind == DLSHIM_OPEN_HIT) {
				assert_true(ok);
				dlshim_engine_release(e, jd, res.slot, res.gen, 0, 0);
			}
			if (ok) {
				delivered = f;
			} else {
				/* what the coordinator does when it cannot deliver */
				failures++;
				failed = res.item;
				assert_int_equal(dlshim_engine_forget_served(e, jd, item[i]), 1);
			}
		}
		assert_true(delivered >= 0);
		(k < 13 ? seen : later)[delivered]++;
	}
	for (int f = 0; f < 16; f++) {
		if (seen[f] != !broken_file(f))
			fail_msg("file %d delivered %d times in the first epoch", f, seen[f]);
		if (later[f] > 1 || (later[f] && broken_file(f)))
			fail_msg("file %d delivered %d times in the second epoch", f, later[f]);
	}
	/* Each broken file failed once (then it was consumed), and the
	 * requests were not counted twice. */
	struct dlshim_job_stats st;
	dlshim_engine_job_stats(e, jd, &st);
	assert_int_equal(failures, 3);
	assert_int_equal(st.redecided, failures);
	assert_int_equal(st.requests, 16);
	/* A stand-in not delivered is no consumed bytes: 16 files of 1000
	 * bytes reached the client (19000 were decided). One failure here
	 * completed its group and so started the epoch: its bytes stay, since
	 * the epoch's starting counts are not rewritten. */
	assert_true(st.bytes_consumed >= 16 * 1000 && st.bytes_consumed <= 17 * 1000);
	assert_int_equal(dlshim_engine_job_epoch_current(e, jd), 1);
	dlshim_engine_destroy(e);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_group_kinds_do_not_mix),
		cmocka_unit_test(test_permutation_wait_given_up),
		cmocka_unit_test_teardown(test_permutation_single_job, teardown),
		cmocka_unit_test_teardown(test_permutation_deferred_and_reopen, teardown),
		cmocka_unit_test_teardown(test_permutation_two_jobs, teardown),
		cmocka_unit_test_teardown(test_permutation_two_jobs_tiny_cache, teardown),
		cmocka_unit_test_teardown(test_permutation_dsa, teardown),
		cmocka_unit_test_teardown(test_dsa_shares_loads, teardown),
		cmocka_unit_test_teardown(test_dsa_job_end_and_late_start, teardown),
		cmocka_unit_test_teardown(test_groups_of_one, teardown),
		cmocka_unit_test_teardown(test_groups_smaller_than_chunk, teardown),
		cmocka_unit_test_teardown(test_empty_dataset, teardown),
		cmocka_unit_test_teardown(test_empty_dataset_does_not_fix_chunk, teardown),
		cmocka_unit_test_teardown(test_hidden_files, teardown),
		cmocka_unit_test_teardown(test_hidden_files_every_epoch, teardown),
		cmocka_unit_test_teardown(test_extensions_separate, teardown),
		cmocka_unit_test_teardown(test_reopen_same_served, teardown),
		cmocka_unit_test_teardown(test_files_added_between_epochs, teardown),
		cmocka_unit_test_teardown(test_waste_accounting, teardown),
		cmocka_unit_test_teardown(test_chunk_auto, teardown),
		cmocka_unit_test_teardown(test_epochs_and_redirects_stats, teardown),
		cmocka_unit_test_teardown(test_io_efficiency, teardown),
		cmocka_unit_test_teardown(test_partial_chunk_loads_handed_over, teardown),
		cmocka_unit_test_teardown(test_order_report, teardown),
		cmocka_unit_test(test_group_absent_for_prefetch),
		cmocka_unit_test(test_redecide_after_failed_load),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
