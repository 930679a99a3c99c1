/* Dependent sampling (JOADER's DSA) over the datasets of concurrent jobs.
 *
 * Each job draws its items uniformly at random without replacement (every
 * epoch is a permutation of its dataset), while jobs that draw in the same
 * round pick the same item as often as possible: for two jobs with datasets
 * D1, D2 and intersection I the probability is |I| / max(|D1|, |D2|), the
 * upper bound for two uniform samplers.
 *
 * Items are dense indices (dlshim_dsa_item maps a file's (dev, ino) to one).
 * Jobs are slots 0..DLSHIM_DSA_MAX_JOBS-1. Every function is O(1) in the
 * number of items except insertion (O(|D|)), compaction and the invariant
 * checker. Not
 * thread-safe: the caller serialises.
 */
#ifndef DLSHIM_DSA_H
#define DLSHIM_DSA_H

#include <stddef.h>
#include <stdint.h>

#define DLSHIM_DSA_MAX_JOBS 128
#define DLSHIM_DSA_NONE UINT32_MAX

/* A set of jobs (bit j = job j). */
struct dlshim_dsa_mask {
	uint64_t w[2];
};

struct dlshim_dsa;

struct dlshim_dsa *dlshim_dsa_create(uint64_t seed);
void dlshim_dsa_destroy(struct dlshim_dsa *d);

/* The item index of a file, created on first sight; NONE on allocation failure. */
uint32_t dlshim_dsa_item(struct dlshim_dsa *d, uint64_t dev, uint64_t ino);
/* The item index of a known file, NONE if never seen. */
uint32_t dlshim_dsa_find(const struct dlshim_dsa *d, uint64_t dev, uint64_t ino);
uint32_t dlshim_dsa_nitems(const struct dlshim_dsa *d);

/* Insert a job's dataset (duplicates and unknown indices are ignored).
 * Returns the job slot, or -1 when all slots are taken, the dataset is empty
 * or memory ran out. The job's first epoch starts now. */
int dlshim_dsa_job_add(struct dlshim_dsa *d, const uint32_t *items, uint32_t n);
/* Add items to a live job's dataset; they are needed in its current epoch. */
int dlshim_dsa_job_extend(struct dlshim_dsa *d, int job, const uint32_t *items, uint32_t n);
/* Delete a job: its remaining items and queue are dropped. O(1) plus its
 * queue: the job is only marked dead; its cells merge (and its memory is
 * freed) at the next compaction, which a later round, insertion or the
 * caller runs. */
void dlshim_dsa_job_remove(struct dlshim_dsa *d, int job);
/* Merge the cells of every job removed since the last compaction and free
 * their memory: O(cells + items moved), once for all of them. job_add does
 * it when no other slot is free. 0, or -1 when out of memory (nothing lost:
 * the dead jobs stay pending). */
int dlshim_dsa_compact(struct dlshim_dsa *d);
/* Removed jobs not compacted yet. */
uint32_t dlshim_dsa_ndead(const struct dlshim_dsa *d);
/* A round compacts once rounds since a removal have walked `ratio` times
 * the cells (0: never; default DLSHIM_DSA_SWEEP_RATIO). */
#define DLSHIM_DSA_SWEEP_RATIO 32
void dlshim_dsa_set_sweep_ratio(struct dlshim_dsa *d, uint32_t ratio);
int dlshim_dsa_job_live(const struct dlshim_dsa *d, int job);
uint32_t dlshim_dsa_job_size(const struct dlshim_dsa *d, int job);
/* Epochs the job has started sampling (1 after insertion). */
uint32_t dlshim_dsa_job_epoch(const struct dlshim_dsa *d, int job);

/* One round for the jobs in `who` (partial sampling: any subset of the live
 * jobs). out[j] receives job j's item for each j in `who`; items are also
 * appended to the jobs' queues. Returns the number of jobs that drew. */
uint32_t dlshim_dsa_round(struct dlshim_dsa *d, struct dlshim_dsa_mask who, uint32_t *out);

/* A job's next item, taken from its queue. When the queue is shorter than
 * `depth`, rounds are run first; every other live job whose queue is shorter
 * than the window joins them, so a slower job later reads what the faster
 * one read (from the cache) and no job ever waits for another. */
uint32_t dlshim_dsa_next(struct dlshim_dsa *d, int job, uint32_t depth);
/* The k-th queued item of a job (0 = next), NONE past the end. */
uint32_t dlshim_dsa_peek(const struct dlshim_dsa *d, int job, uint32_t k);
uint32_t dlshim_dsa_queued(const struct dlshim_dsa *d, int job);
/* Longest queue a job that is not asking may be given (default 64). */
void dlshim_dsa_set_window(struct dlshim_dsa *d, uint32_t window);

/* For RefCnt: queued-but-unread entries of the item over all jobs, and the
 * number of live jobs that still need it this epoch (not yet drawn, or drawn
 * and still queued). */
uint32_t dlshim_dsa_pending(const struct dlshim_dsa *d, uint32_t item);
uint32_t dlshim_dsa_needed(const struct dlshim_dsa *d, uint32_t item);

/* Number of intersection cells (distinct job sets) holding items. */
uint32_t dlshim_dsa_ncells(const struct dlshim_dsa *d);

/* Check every structural invariant; 0, or -1 with a message in err. */
int dlshim_dsa_check(const struct dlshim_dsa *d, char *err, size_t errlen);

#endif
