/* Which files of a label group a job that spans nodes consumed in the
 * group's current epoch: the record kept by the group's claim authority
 * (one node of the cluster per group, peers/peer_claims.c). A node of the
 * job serves a file only after its claim was granted here, so every file
 * is served once per group epoch across all the job's nodes; and since
 * the authority sees every claim of the group, it knows when the group's
 * epoch is complete, which no node's own view of the job can tell. No UCX,
 * no engine: unit-tested on its own. Thread-safe (one mutex). */
#ifndef DLSHIM_CLAIM_TABLE_H
#define DLSHIM_CLAIM_TABLE_H

#include <stddef.h>
#include <stdint.h>

struct claim_table;

struct claim_table *claim_table_new(void);
void claim_table_free(struct claim_table *t);

/* What a node learns with each answer: files of the group that other nodes
 * took in the epoch answered about since this node last asked (at most
 * `max`; the rest come with later answers), so that its own view of the
 * job catches up and its next decisions avoid them. */
struct claim_sync {
	uint64_t *file;
	uint32_t max, n;
};

/* Node `node` (< CLAIM_MAX_NODES) wants to consume file `file` (a path
 * hash) of group `group` (a hash of its key; `size` files) for job `job`
 * (a name hash), in its view of the group's epoch, `epoch`. A view ahead
 * of the record means the node saw the group complete: the record moves
 * to that epoch.
 *   1: granted in epoch *at (>= epoch: a node behind gets its file in the
 *      current epoch and must catch up), recorded; the grant that makes
 *      `size` files starts the group's next epoch;
 *   0: refused, the file is consumed in epoch *at by another node (a
 *      repeated claim by the same node in the same epoch is granted);
 *  -1: out of memory, nothing recorded.
 * `sync` (may be NULL) receives other nodes' files of epoch *at. */
#define CLAIM_MAX_NODES 64
int claim_table_claim(struct claim_table *t, uint64_t job, uint64_t group, uint64_t file, uint32_t size,
		      uint32_t epoch, uint32_t node, uint32_t *at, struct claim_sync *sync);
/* The group's current epoch for the job (after adopting `epoch` if it is
 * ahead), for a node that re-opens a file it was served in `epoch`: 1 when
 * that epoch is still the current one, 0 when the group has moved on (*at
 * says to which epoch). -1: out of memory. `sync` as above. */
int claim_table_current(struct claim_table *t, uint64_t job, uint64_t group, uint32_t epoch, uint32_t node,
			uint32_t *at, struct claim_sync *sync);
/* Groups recorded (one per job and group). */
size_t claim_table_count(struct claim_table *t);

#endif
