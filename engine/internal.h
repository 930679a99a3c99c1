/* Engine internals shared by engine.c (catalog, jobs, slots) and
 * redirect.c (redirect decisions). Private memory only. */
#ifndef DLSHIM_ENGINE_INTERNAL_H
#define DLSHIM_ENGINE_INTERNAL_H

#include <stdint.h>
#include <uthash.h>

#include "dlshim/engine.h"
#include "dlshim/shm.h"
#include "evict.h"

#define NONE UINT32_MAX

enum item_state { ITEM_ABSENT = 0, ITEM_LOADING, ITEM_RESIDENT };

/* One file known to the engine, identified by (dev, ino) across jobs. */
struct item {
	uint64_t dev, ino, size;
	int64_t mtime_ns, ctime_ns;
	uint32_t slot;     /* NONE unless loading or resident */
	uint32_t refcnt;   /* live jobs that still need it this epoch */
	/* Label groups, one per kind: a file belongs to its directory's group
	 * for `dir` jobs and to its root's for `any` and exact jobs. */
	uint32_t group[2];    /* NONE when no job of that kind declared it */
	uint32_t chunk[2];    /* physical chunk within that group */
	uint32_t gres_pos[2]; /* position in that group's resident list, NONE if absent */
	uint32_t ext;      /* hash of the name extension */
	uint32_t dsa_pending; /* queued for jobs by shared samplers, not yet read */
	uint32_t holds;    /* row mappings whose epoch still has unused rows here (HDF5 row chunks) */
	uint8_t state;
	uint8_t hidden;    /* name starts with '.': never a redirect target */
	char *path;        /* NULL unless declared by a scan */
};

/* Private shadow of each shared slot: who owns it and how many pins. */
struct slot_priv {
	uint32_t item;     /* NONE when free or orphaned */
	uint32_t pins;
	uint64_t gen;      /* last published generation */
	uint8_t used;
	uint8_t indexed;   /* listed in the shared index */
};

struct key_node {
	struct {
		uint64_t dev, ino;
	} key;
	uint32_t item;
	UT_hash_handle hh;
};

enum { GK_DIR = 0, GK_ROOT = 1 };

/* A label group: files that may stand in for one another. */
struct group {
	char *key;
	uint32_t id;
	int kind;                    /* GK_DIR or GK_ROOT */
	uint32_t *items, n, cap;     /* members; sorted by inode once cut */
	uint32_t nchunks, k;         /* chunk c = items[c*k .. c*k+k) */
	uint32_t *res, nres, rescap; /* members loading or resident */
	int dirty;                   /* members added since the last cut */
	struct dlshim_dsa *dsa;      /* shared sampler (DLSHIM_SAMPLER=dsa), NULL until used */
	uint32_t *dsa_back, ndsa_back, dsa_back_cap; /* sampler index -> item */
	uint64_t dsa_mean;           /* mean cache bytes of a member */
	uint32_t pf_next;            /* where the next remote-prefetch scan starts */
	UT_hash_handle hh;
};

/* Per job and group: the group's epoch. */
struct jgroup {
	uint32_t size, cons, epoch;
	uint32_t dsa_slot1;  /* job slot in the group's sampler + 1; 0 = none */
	uint32_t dsa_hold1;  /* drawn item waiting for its load + 1; 0 = none */
};

/* Which file a request was served this epoch (re-opens get the same). */
struct remap {
	uint32_t req, served, epoch;
	UT_hash_handle hh;
};

/* The (requested, served) sequence of the running epoch (order_stats.c). */
struct order_track {
	uint32_t *req, *srv, n, cap;
	uint32_t *prev_next;  /* per item: its successor in its group last epoch */
	uint32_t prev_items;  /* length of prev_next */
};

struct job {
	char name[DLSHIM_JOB_MAX];
	uint32_t sessions;
	int live;
	uint64_t *needed, *consumed; /* bitmaps over item ids */
	uint64_t dataset_size, consumed_count;
	int has_dataset;
	uint64_t declared;   /* files declared with add_file/add_item */
	uint32_t *pend_item, *pend_group, npend, pend_cap; /* add_file before dataset_done */
	enum dlshim_redirect mode;
	enum dlshim_sampler sampler;
	struct jgroup *jg;
	uint32_t njg;
	uint32_t max_epoch;  /* highest group epoch started */
	int rescan_due;      /* a new epoch started: look for files added meanwhile */
	/* Stats at the start of each epoch (ring of the last EPOCH_HIST). */
#define EPOCH_HIST 64
	struct dlshim_job_stats hist[EPOCH_HIST];
	uint64_t hist_waste[EPOCH_HIST];
	struct dlshim_order_stats hist_order[EPOCH_HIST]; /* of each finished epoch */
	struct order_track order;
	struct remap *remaps;
	struct dlshim_job_stats st;
};

struct dlshim_engine {
	struct dlshim_shm_header *hdr;
	struct dlshim_shm_slot *slots;
	uint32_t *next;
	struct dlshim_shm_index *shidx;  /* shared index, see shm.h */
	struct slot_priv *sp;
	uint32_t *free_slots, nfree_slots;
	uint32_t *free_blocks, nfree_blocks;
	uint64_t nblocks, nslots;

	struct item *items;
	uint32_t nitems, items_cap;
	struct key_node *index;

	struct group **groups;       /* by id */
	uint32_t ngroups, groups_cap;
	struct group *group_index;   /* by key */
	uint32_t chunk_k;            /* files per chunk, fixed at the first cut */

	struct job jobs[DLSHIM_ENGINE_MAX_JOBS];
	int njobs;

	struct evictor ev;
	uint64_t max_item_bytes;
	uint64_t pinned_slots;
	struct dlshim_cache_stats cs;
};

struct job;
/* Which of an item's groups a job uses. */
#define GKIND(jb) ((jb)->mode == DLSHIM_REDIRECT_DIR ? GK_DIR : GK_ROOT)

/* RefCnt's key: live jobs that still need the item this epoch, plus the
 * jobs that already drew it and will read it soon (shared sampling), plus
 * the row mappings that will still serve rows of it (HDF5 redirect). */
static inline uint32_t eng_evict_key(const struct item *x) { return x->refcnt + x->dsa_pending + x->holds; }

static inline int bit_get(const uint64_t *b, uint32_t i) { return (b[i / 64] >> (i % 64)) & 1; }
static inline void bit_set(uint64_t *b, uint32_t i) { b[i / 64] |= 1ULL << (i % 64); }
static inline void bit_clr(uint64_t *b, uint32_t i) { b[i / 64] &= ~(1ULL << (i % 64)); }

/* engine.c services used by redirect.c */
uint32_t eng_item_get(struct dlshim_engine *e, const struct dlshim_file_id *id);
void eng_job_need(struct dlshim_engine *e, struct job *jb, uint32_t it);
void eng_job_consume(struct dlshim_engine *e, struct job *jb, uint32_t req, uint32_t served);
/* Another node of the job consumed `it` (redirect modes): consumed here
 * too, without the order and byte accounting of a file served here. */
void eng_job_consume_elsewhere(struct dlshim_engine *e, struct job *jb, uint32_t it);
int eng_start_load(struct dlshim_engine *e, struct job *jb, uint32_t it, int spare);
void eng_pin(struct dlshim_engine *e, uint32_t slot);
void eng_hit(struct dlshim_engine *e, struct job *jb, uint32_t it, struct dlshim_open_result *res);
void eng_group_res_add(struct dlshim_engine *e, uint32_t it);
void eng_group_res_del(struct dlshim_engine *e, uint32_t it);
void eng_group_rollover(struct dlshim_engine *e, struct job *jb, uint32_t group);

/* order_stats.c */
void order_note(struct order_track *t, uint32_t req, uint32_t served);
int order_epoch_end(struct dlshim_engine *e, struct job *jb, struct dlshim_order_stats *out);
void order_free(struct order_track *t);

/* Can `x` stand in for a request of `rq` in job `jb`? */
static inline int eng_candidate(const struct job *jb, const struct item *rq, const struct item *x, uint32_t xi)
{
	return !x->hidden && x->ext == rq->ext && bit_get(jb->needed, xi) && !bit_get(jb->consumed, xi);
}

/* dsa_redirect.c: the shared sampler behind redirection */
uint32_t dsa_choose(struct dlshim_engine *e, struct job *jb, struct group *g, uint32_t req);
void dsa_hold(struct job *jb, struct group *g, uint32_t it);
void dsa_load_ahead(struct dlshim_engine *e, struct job *jb, struct group *g, struct dlshim_open_result *res);
void dsa_job_end(struct dlshim_engine *e, struct job *jb);
void dsa_group_free(struct group *g);

/* redirect.c */
void redirect_open(struct dlshim_engine *e, int j, uint32_t req, unsigned flags, struct dlshim_open_result *res);
void redirect_cut_groups(struct dlshim_engine *e, uint32_t chunk);
void redirect_job_end(struct dlshim_engine *e, struct job *jb);

#endif
