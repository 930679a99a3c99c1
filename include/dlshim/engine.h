/* The dlshim engine: a plain library that owns the catalog of dataset files,
 * the jobs, the shared cache's allocation and the eviction policy, and makes
 * every decision. It does no socket I/O and knows nothing of processes: the
 * coordinator wraps it (one mutex around every call) and unit tests drive it
 * directly on a private buffer.
 *
 * Limitations: not thread-safe by itself; item ids and job ids are dense
 * indices valid for the engine's lifetime; at most DLSHIM_ENGINE_MAX_JOBS
 * live jobs.
 */
#ifndef DLSHIM_ENGINE_H
#define DLSHIM_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "dlshim/config.h"

#define DLSHIM_ENGINE_MAX_JOBS 64
#define DLSHIM_NO_ITEM UINT32_MAX

struct dlshim_engine;

struct dlshim_engine_opts {
	void *shm_base;           /* formatted by dlshim_engine_create */
	size_t shm_len;
	enum dlshim_evict evict;
	uint64_t seed;
	uint64_t max_item_bytes;  /* larger files pass through */
};

/* A file version: (dev, ino) names the file; size, mtime and ctime tell its
 * versions apart (ctime also catches a rewrite whose mtime was put back and
 * an inode number reused by a new file). */
struct dlshim_file_id {
	uint64_t dev, ino;
	uint64_t size;
	int64_t mtime_ns;
	int64_t ctime_ns;
};

enum dlshim_open_kind {
	DLSHIM_OPEN_HIT = 1,      /* published in `slot` with `gen`; pinned for the caller */
	DLSHIM_OPEN_LOAD,         /* caller must fill `slot` and call load_done; pinned */
	DLSHIM_OPEN_WAIT,         /* another caller is loading it: wait, then ask again */
	DLSHIM_OPEN_PASS,         /* not cached (too big, no space): read the real file */
	DLSHIM_OPEN_LOAD_CHUNK,   /* caller loads every load_item by path, then serves `served` */
};

#define DLSHIM_MAX_CHUNK 256


struct dlshim_open_result {
	enum dlshim_open_kind kind;
	uint32_t item;            /* the item served (the requested one unless redirected) */
	uint32_t requested;
	uint32_t slot;
	uint64_t gen;
	uint64_t size;
	/* LOAD_CHUNK: items to load (each pinned once for the loader, slot
	 * allocated). `item` is among them or already resident and pinned. */
	uint32_t nload;
	uint32_t ahead;           /* the loads are ahead of demand: do them after replying */
	/* Redirect modes: `decided` 1 when this call decided the request
	 * (consumed `item` for the job in the group epoch `gepoch`); `repeat`
	 * 1 when it served the decision already taken for the request in the
	 * group's current epoch `gepoch` (a re-open). Both 0 in exact mode and
	 * for a file outside the job's dataset. */
	uint32_t decided, repeat;
	uint32_t gepoch;
	uint32_t load_item[DLSHIM_MAX_CHUNK];
	uint32_t load_slot[DLSHIM_MAX_CHUNK];
};

struct dlshim_job_stats {
	uint64_t requests, hits, misses, waits, passthrough;
	uint64_t bytes_from_disk, bytes_from_cache, bytes_passthrough;
	uint64_t epochs, files_loaded, evictions;
	uint64_t redirects, chunk_loads, bytes_consumed, loads_ahead;
	uint64_t row_index_hits;  /* HDF5 row reads clients served through the shared index, no message */
	uint64_t redecided;       /* redirect decisions dropped because the served file could not be delivered */
};

/* How far an epoch's served order is from an independent shuffle
 * (engine/order_stats.c says how each is measured). */
struct dlshim_order_stats {
	uint32_t n;               /* files served in the epoch; 0: not measured */
	uint32_t has_prev;        /* pair_repeat measured (a previous epoch exists) */
	float displacement;       /* 0 exact, ~1/3 independent of the requests */
	float locality, locality_shuffle;
	float pair_repeat, pair_repeat_shuffle;
	float class_mix;          /* 1 = batches as mixed as a shuffle's */
};

/* One epoch of a job (epochs counted from 0; the last one may be running). */
struct dlshim_epoch_stats {
	uint32_t epoch, complete;
	uint64_t requests, redirects, chunk_loads, bytes_from_disk, bytes_consumed;
	uint64_t waste_bytes;     /* cache-wide waste during the epoch */
	struct dlshim_order_stats order; /* complete epochs only */
};

struct dlshim_cache_stats {
	uint64_t capacity_bytes, used_bytes, items_resident, items_pinned, items_known;
	uint64_t loads, evictions, stale_reloads, alloc_failures;
	uint64_t spare_refused;   /* loads ahead not done: the cache held only needed items */
	uint64_t waste_bytes;     /* loaded, then evicted while a live job still needed it */
	uint32_t chunk_files;     /* files per physical chunk in use (0 = not set yet) */
};

/* Create an engine over `opts->shm_base` (formats the segment). NULL on
 * a segment too small to hold one block or on allocation failure. */
struct dlshim_engine *dlshim_engine_create(const struct dlshim_engine_opts *opts);
void dlshim_engine_destroy(struct dlshim_engine *e);

/* Attach one client session to the job named `name` (created if absent).
 * Returns the job id or -1 when the job table is full. Each attach must be
 * matched by a detach; the job ends (its references are dropped) when its
 * last session detaches. */
int dlshim_engine_job_attach(struct dlshim_engine *e, const char *name);
void dlshim_engine_job_detach(struct dlshim_engine *e, int job);
/* Detach in two steps, so a job can outlive a moment without sessions
 * (DataLoader workers are re-forked every epoch): release drops a session
 * and keeps the job's state; end finishes a job with no sessions left. */
void dlshim_engine_job_release(struct dlshim_engine *e, int job);
void dlshim_engine_job_end(struct dlshim_engine *e, int job);
int dlshim_engine_job_sessions(struct dlshim_engine *e, int job);
/* Declare that `id` belongs to the job's dataset (roots scanned by the
 * caller). Safe to repeat. Returns the item id. */
uint32_t dlshim_engine_job_add_item(struct dlshim_engine *e, int job, const struct dlshim_file_id *id);
/* ---- datasets and redirection ----
 * A job's dataset is declared with job_add_file (after a scan of its roots
 * or its file list). `group` is the label group: the file's directory for
 * DLSHIM_REDIRECT=dir, the root for any, NULL in exact mode. With a
 * redirect mode set, dlshim_engine_open may serve another resident,
 * not-yet-consumed file of the requested one's group (same extension, never
 * a hidden file); each file is served once per job and group epoch. */
uint32_t dlshim_engine_job_add_file(struct dlshim_engine *e, int job, const struct dlshim_file_id *id,
				    const char *path, const char *group);
/* Finish a dataset declaration: cut groups into chunks of `chunk` files
 * (0 = auto from the cache size, group count and mean file size) in inode
 * order, and enable `mode` for the job. */
void dlshim_engine_job_dataset_done(struct dlshim_engine *e, int job, enum dlshim_redirect mode, uint32_t chunk);
int dlshim_engine_job_has_dataset(struct dlshim_engine *e, int job);
/* Which sampler picks the served file in redirect modes (default chunk);
 * dsa shares draws with the other dsa jobs of each label group. */
void dlshim_engine_job_set_sampler(struct dlshim_engine *e, int job, enum dlshim_sampler s);
enum dlshim_sampler dlshim_engine_job_sampler(struct dlshim_engine *e, int job);
/* True once after a job starts a new epoch (its first group rolling over):
 * the caller should scan the job's roots again and declare new files with
 * job_add_file + job_dataset_done, so files added between epochs join. */
int dlshim_engine_job_rescan_due(struct dlshim_engine *e, int job);
/* Statistics of epoch `epoch` of the job (the last 64 are kept); -1 when
 * unknown. */
int dlshim_engine_job_epoch_stats(struct dlshim_engine *e, int job, uint32_t epoch, struct dlshim_epoch_stats *out);
uint32_t dlshim_engine_job_epoch_current(struct dlshim_engine *e, int job);
/* One of the job's HDF5 row mappings started epoch `epoch`: the first thing
 * the job reads to get there starts the epoch for the whole job (statistics
 * per epoch, complete file groups roll over), as a file group does. */
void dlshim_engine_job_rows_epoch(struct dlshim_engine *e, int job, uint32_t epoch);
const char *dlshim_engine_item_path(struct dlshim_engine *e, uint32_t item);
/* The version of the file the catalog describes (the one cached when the
 * item is resident). -1 for an unknown item. */
int dlshim_engine_item_id(struct dlshim_engine *e, uint32_t item, struct dlshim_file_id *out);
/* The file on disk is `now`, no longer the catalog's version: drop the
 * cached bytes (pinned readers keep their generation check) and remember
 * the new version, so the next load reads it. */
void dlshim_engine_item_changed(struct dlshim_engine *e, uint32_t item, const struct dlshim_file_id *now);
uint64_t dlshim_engine_item_size(struct dlshim_engine *e, uint32_t item);
/* Files per chunk that `auto` picks for the given sizes (exposed for tests). */
uint32_t dlshim_chunk_auto(uint64_t cache_bytes, uint32_t ngroups, uint64_t mean_file_bytes);

int dlshim_engine_job_find(struct dlshim_engine *e, const char *name);
const char *dlshim_engine_job_name(struct dlshim_engine *e, int job);
int dlshim_engine_job_live(struct dlshim_engine *e, int job);
int dlshim_engine_njobs(struct dlshim_engine *e);   /* ids are 0..njobs-1, live or not */

#define DLSHIM_OPEN_F_RETRY 1u  /* asking again after WAIT: not a new request */
#define DLSHIM_OPEN_F_NOWAIT 2u /* waited too long: decide now (HIT, a load or PASS), never WAIT */
/* Exact-mode load ahead of demand (HDF5 row chunks): the job will need the
 * file but has not read it, so it is needed, not consumed (RefCnt keeps it
 * until read); LOAD if absent, else PASS (nothing to do), never WAIT or a
 * hit; counted in loads_ahead, not as a request or a miss. */
#define DLSHIM_OPEN_F_AHEAD 4u
/* The item's need is counted by holds (dlshim_engine_item_hold), not by
 * this open: it is neither needed nor consumed here (HDF5 row chunks of a
 * redirect mapping, whose rows are served without opening the chunk). */
#define DLSHIM_OPEN_F_HELD 8u
/* Load only into room no job needs: evict nothing whose RefCnt key is
 * above 0; PASS (counted in spare_refused) when there is none. */
#define DLSHIM_OPEN_F_SPARE 16u

/* Request the file `id` for `job`. Never blocks. */
void dlshim_engine_open(struct dlshim_engine *e, int job, const struct dlshim_file_id *id,
			unsigned flags, struct dlshim_open_result *res);
/* Scatter list covering the bytes of a slot being loaded, starting at item
 * offset `off`. Returns the number of iovecs filled (<= max). Needs no lock
 * against other engine calls while the caller holds the slot's LOAD (its
 * chain does not change until load_done). */
int dlshim_engine_slot_iov(struct dlshim_engine *e, uint32_t slot, uint64_t off, struct iovec *iov,
			   int max);
/* Finish a LOAD: publish on ok (returns the new generation, which the loader
 * now holds pinned) or free the slot and return 0. */
uint64_t dlshim_engine_load_done(struct dlshim_engine *e, int job, uint32_t item, int ok);
/* Drop one pin on `slot` taken by a HIT or LOAD with generation `gen`
 * (slot UINT32_MAX: nothing pinned, only account bytes). `bytes_cache` /
 * `bytes_pass` are what the client served from the cache / from the real
 * descriptor. A release that matches no pin is ignored and returns -1. */
int dlshim_engine_release(struct dlshim_engine *e, int job, uint32_t slot, uint64_t gen,
			  uint64_t bytes_cache, uint64_t bytes_pass);
/* A client found `id` resident through the shared index and read it
 * without asking (no pin): account the request, hit and consumption. */
void dlshim_engine_fast_hit(struct dlshim_engine *e, int job, const struct dlshim_file_id *id);
/* Account `n` requests that clients served from the cache through the
 * shared index without asking, and `redirects` row reads served another
 * row than asked (HDF5 rows, reported in batches). */
void dlshim_engine_note_rows(struct dlshim_engine *e, int job, uint64_t n, uint64_t redirects);
/* Redirect modes: the file the last open of `requested` was served could
 * not be delivered to the client (its load failed, its home node is gone,
 * it changed at open). It stays consumed for the job's group epoch; the
 * request's decision is dropped, so that the next dlshim_engine_open of
 * `requested` (with DLSHIM_OPEN_F_RETRY: not a new request) serves another
 * unconsumed file of its group, possibly itself. Returns 1 when a decision
 * was dropped, 0 when the request was not decided by redirection (exact
 * mode, a file outside the job's dataset): then there is nothing to
 * re-decide. */
int dlshim_engine_forget_served(struct dlshim_engine *e, int job, uint32_t requested);
/* ---- a job whose ranks run on several nodes (redirect modes) ----
 * Each node's engine decides its own requests; the nodes' claims keep the
 * job's epochs whole (engine/daemon/peers/peer_claims.c). These say what a
 * claim needs and apply what it answered. */
/* `item`'s label group in the job: its key (the same string on every node)
 * and how many files it has. -1 when `item` is not in the job's dataset. */
int dlshim_engine_item_group(struct dlshim_engine *e, int job, uint32_t item, const char **key, uint32_t *size);
/* The job's group of `item` is in epoch `epoch` elsewhere, which means
 * every member was consumed in each earlier epoch: start that epoch here
 * if the group is behind (its files are needed again). With `consumed`,
 * `item` then counts as consumed in that epoch (another node has it, or
 * this node got it there). Returns the group's epoch after the call, or
 * UINT32_MAX when `item` is not in the job's dataset. */
uint32_t dlshim_engine_group_catch_up(struct dlshim_engine *e, int job, uint32_t item, uint32_t epoch, int consumed);
/* Account a routed open that the client served without the cache. */
void dlshim_engine_note_pass(struct dlshim_engine *e, int job, uint64_t bytes);

/* Upcoming files of job `j` for a remote prefetch (multi-node): start
 * loading up to `max` absent members of `req`'s label group that the job
 * has not read this group epoch and that `want` accepts; each gets a slot
 * pinned for the loader (finish each with load_done, as for LOAD_CHUNK).
 * Redirect modes only; at most an eighth of the cache. Returns the count. */
uint32_t dlshim_engine_group_absent(struct dlshim_engine *e, int j, uint32_t req, int (*want)(void *ctx, uint32_t item),
				    void *ctx, uint32_t *items, uint32_t *slots, uint32_t max);

/* Read-only state for stats and tests. */
void dlshim_engine_job_stats(struct dlshim_engine *e, int job, struct dlshim_job_stats *out);
void dlshim_engine_cache_stats(struct dlshim_engine *e, struct dlshim_cache_stats *out);
/* Number of live jobs that still need `item` this epoch (RefCnt). */
uint32_t dlshim_engine_item_refcnt(struct dlshim_engine *e, uint32_t item);
/* Holds: a row mapping still has unused rows in the row chunk (dev, ino)
 * this epoch, so it keeps the chunk as a job that needs it keeps a file
 * (part of RefCnt's key). delta +1 or -1; the count never goes below 0.
 * Returns 0 when no such item is known (nothing counted). */
int dlshim_engine_item_hold(struct dlshim_engine *e, uint64_t dev, uint64_t ino, int delta);
uint32_t dlshim_engine_item_holds(struct dlshim_engine *e, uint32_t item);
/* A held item's every row was served to `job` this epoch: count its size
 * in the job's bytes_consumed (I/O efficiency), as a consumed file is. */
void dlshim_engine_item_spent(struct dlshim_engine *e, int job, uint64_t dev, uint64_t ino);
int dlshim_engine_item_resident(struct dlshim_engine *e, uint32_t item);
int dlshim_engine_item_loading(struct dlshim_engine *e, uint32_t item);
uint32_t dlshim_engine_item_pins(struct dlshim_engine *e, uint32_t item);
uint64_t dlshim_engine_segment_id(struct dlshim_engine *e);
uint32_t dlshim_engine_find_item(struct dlshim_engine *e, uint64_t dev, uint64_t ino);
/* A row redirect epoch started: publish it (shm header rows_epochs). */
void dlshim_engine_rows_epoch_bump(struct dlshim_engine *e);

#endif
