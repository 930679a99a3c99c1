/* Rows of HDF5 datasets in the cache, and the per-job row mapping used when
 * rows are redirected.
 *
 * A dataset's rows are cached in row chunks: runs of `chunk_rows`
 * consecutive rows (whole HDF5 chunks), each one cache item under a
 * synthetic identity derived from the file, the dataset and the chunk, so
 * the engine's slots, pins, eviction and statistics apply unchanged and
 * every job reading the same dataset shares the same items.
 *
 * With redirection on, a job's request for row i of a dataset may be served
 * as another row j. The mapping belongs to (job, file, first dimension): every
 * dataset of the file with the same number of rows sees the same i -> j
 * within an epoch, so inputs and labels stay pairs. Each row is served once
 * per epoch; resident rows go first. Not thread-safe: the caller locks.
 */
#ifndef DLSHIM_ROWS_H
#define DLSHIM_ROWS_H

#include <stdint.h>

#include "dlshim/engine.h"

/* Bit 63 of a device number never occurs in a real one: synthetic row
 * chunk identities cannot collide with files. */
#define DLSHIM_ROWS_DEV_BIT (1ULL << 63)

uint64_t dlshim_rows_name_hash(const char *s);

/* Identity of row chunk `chunk` (rows chunk*chunk_rows ...) of the dataset
 * whose name hashes to `dset_hash` in the file (dev, ino, mtime); `bytes` is
 * the chunk's size. */
void dlshim_rows_chunk_id(uint64_t dev, uint64_t ino, int64_t mtime_ns, uint64_t dset_hash, uint64_t chunk_rows,
			  uint64_t chunk, uint64_t bytes, struct dlshim_file_id *out);

struct dlshim_rows;

/* Is the chunk holding rows [first, first + n) resident? */
typedef int (*dlshim_rows_resident_fn)(void *ctx, uint64_t first, uint64_t n);

struct dlshim_rows *dlshim_rows_create(void);
void dlshim_rows_destroy(struct dlshim_rows *r);

/* Holds. A mapping keeps the row chunks that still have rows it has not
 * served this epoch, so that eviction (RefCnt) takes spent chunks first
 * and the rows resident at an epoch's end survive until the next epoch
 * has served them. `fn(ctx, job, chunk, how)` adds (+1) or removes one
 * hold on the chunk's item: -1 when the job's epoch has served every row
 * of it (the job consumed it), 0 when the mapping gives it back otherwise
 * (job end, another chunking). It returns 0 when the cache does not know
 * the chunk (nothing held: dlshim_rows_chunk_cached tries again once it
 * does). */
typedef int (*dlshim_rows_hold_fn)(void *ctx, int job, const struct dlshim_file_id *chunk, int how);
void dlshim_rows_set_hold(struct dlshim_rows *r, dlshim_rows_hold_fn fn, void *ctx);
/* Which items the job's mapping of the file holds: row chunks of
 * `chunk_rows` rows of the dataset `dset_hash` of file version
 * `mtime_ns` (as dlshim_rows_chunk_id). A change gives back the old holds
 * and takes the new ones. Creates the mapping if needed. */
void dlshim_rows_bind(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino, uint64_t nrows,
		      int64_t mtime_ns, uint64_t dset_hash, uint64_t chunk_rows);
/* Chunk `chunk` of that identity has just become known to the cache (its
 * first load): every mapping bound to it that needs it holds it now. */
void dlshim_rows_chunk_cached(struct dlshim_rows *r, uint64_t dev, uint64_t ino, uint64_t nrows, int64_t mtime_ns,
			      uint64_t dset_hash, uint64_t chunk_rows, uint64_t chunk);

/* The row to serve for `row` of dataset `dset_key` (any stable number per
 * dataset, e.g. dlshim_rows_name_hash of its name) of a file with `nrows`
 * rows, for job (`job`, `job_key`). `chunk_rows` is the chunking of the
 * file's dataset with the largest rows (the one whose reads cost), used with
 * `resident` to prefer rows already in memory. Returns
 * the served row, or -1 (no memory, too many datasets, bad row): the caller
 * then serves `row` itself. */
int64_t dlshim_rows_map(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			uint64_t nrows, uint64_t dset_key, uint64_t row, uint64_t chunk_rows,
			dlshim_rows_resident_fn resident, void *ctx);

/* The mapping's epoch (0 first), -1 when the job has none for this file. */
int64_t dlshim_rows_epoch(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			  uint64_t nrows);
/* Rows of the file that none of its datasets asked for in the mapping's
 * last finished epoch (they were served for other rows' requests): many
 * mean the job reads only part of the file, a split by index or a subset.
 * -1 before the first epoch ends, or with no mapping. */
int64_t dlshim_rows_unasked(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			    uint64_t nrows);

/* Load-ahead: after `served` was mapped, the chunk (index) to load next
 * when the served row's chunk has just reached half its rows unused: the
 * next chunk after it with every row unused this epoch and not `resident`.
 * -1 when nothing is to be loaded now. */
int64_t dlshim_rows_ahead(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			  uint64_t nrows, uint64_t chunk_rows, uint64_t served, dlshim_rows_resident_fn resident, void *ctx);

/* Epochs started so far by every map together (a new epoch invalidates
 * mappings clients remember). */
uint64_t dlshim_rows_epochs_started(const struct dlshim_rows *r);

/* Forget every mapping of a job (it ended). Leases bound to its mappings
 * are unbound (they hold nothing afterwards). */
void dlshim_rows_job_end(struct dlshim_rows *r, int job);

/* ---- Leases: rows decided ahead, claimed by the client without a message.
 *
 * The coordinator fills a lease (one per client connection, in a small
 * memory area shared read-write with that client) with rows it has marked
 * used in the job's mapping. The client takes entry t for its requested row
 * i by compare-and-swap of state[t] from 0 to DLSHIM_LEASE_TAKEN | i (after
 * writing dset[t]), then serves row served[t]; the coordinator revokes an
 * entry by the swap 0 -> DLSHIM_LEASE_REVOKED. Whoever swaps first wins, so
 * a row is either taken by the client (and recorded as requested row i ->
 * served[t] when the coordinator next looks) or given back to the epoch,
 * never both. The coordinator keeps its own copy of what it leased and
 * trusts nothing else in the area: a taken entry with a bad row, or a state
 * word that is neither 0 nor a taken row, consumes the row without mapping
 * it (never served twice). A client that exits or crashes loses nothing:
 * the coordinator settles its lease when the connection ends (taken rows
 * recorded, the rest given back). */
#define DLSHIM_LEASE_ROWS 64
#define DLSHIM_LEASE_MAGIC 0x31455341454c5752ULL /* "RWLEASE1" */
#define DLSHIM_LEASE_TAKEN (1ULL << 63)
#define DLSHIM_LEASE_REVOKED (1ULL << 62)

struct dlshim_rows_lease_shm {
	uint64_t magic;
	uint64_t fill;                               /* bumped at every fill (diagnostics) */
	uint32_t count;                              /* entries of this fill */
	uint32_t pad;
	uint32_t served[DLSHIM_LEASE_ROWS];          /* written by the coordinator */
	uint64_t dset[DLSHIM_LEASE_ROWS];            /* the taker's dataset key, written before the swap */
	_Atomic uint64_t state[DLSHIM_LEASE_ROWS];   /* 0 free, TAKEN | requested row, REVOKED */
};

struct dlshim_rows_lease;

/* A lease over `shm` (zeroed or reused memory; formatted here). NULL on
 * no memory. */
struct dlshim_rows_lease *dlshim_rows_lease_new(struct dlshim_rows *r, struct dlshim_rows_lease_shm *shm);

/* Settle (taken entries recorded, the rest given back) and forget. */
void dlshim_rows_lease_free(struct dlshim_rows *r, struct dlshim_rows_lease *l);

/* Settle the lease's previous entries, then fill it with up to `want`
 * (at most DLSHIM_LEASE_ROWS) unused rows of resident chunks of the job's
 * mapping of the file. Returns the rows leased (0: none).
 * *ahead is set to a chunk to load ahead (as dlshim_rows_ahead), or -1. */
uint32_t dlshim_rows_lease_fill(struct dlshim_rows *r, struct dlshim_rows_lease *l, int job, uint64_t job_key,
				uint64_t dev, uint64_t ino, uint64_t nrows, uint32_t want, uint64_t chunk_rows,
				dlshim_rows_resident_fn resident, void *ctx, int64_t *ahead);

/* Rows of the job's mapping of the file still out in leases (not taken,
 * not given back), and rows consumed this epoch (mapped, taken or lost). */
uint64_t dlshim_rows_leased(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			    uint64_t nrows);
uint64_t dlshim_rows_consumed(struct dlshim_rows *r, int job, uint64_t job_key, uint64_t dev, uint64_t ino,
			      uint64_t nrows);

#endif
