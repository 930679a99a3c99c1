/* Checks on coordinator <-> coordinator messages (peer_proto.h), kept apart
 * from the transport so they can be tested and fuzzed on their own. Every
 * function copies what it returns out of the (unaligned) message and
 * returns -1 (or PEER_WIRE_MALFORMED) for anything a well-behaved peer of
 * this cluster would not send. */
#ifndef DLSHIM_PEER_WIRE_H
#define DLSHIM_PEER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "peer_proto.h"

/* HELLO from another node of an `nnodes` cluster with our block size; its
 * packed rkey (h->rkey_len bytes, never empty) follows the header. */
int peer_wire_hello(const void *data, size_t len, int nnodes, int self, uint32_t block_size, struct peer_hello *h);

/* FETCH: returns 1 + ncand and points paths[] at its NUL-terminated paths. */
int peer_wire_fetch(const void *data, size_t len, int nnodes, int self, struct peer_fetch *h,
		    const char *paths[1 + PEER_PREFETCH_MAX]);

/* FETCH_R: the first header alone (whose request is it?). */
int peer_wire_fetch_r_head(const void *data, size_t len, int nnodes, int self, struct peer_fetch_r *h);

/* FETCH_R as a whole, for request `req` to `node` that named `nitems` files:
 * fills recs[] (room for nitems) and returns the record count, or one of: */
#define PEER_WIRE_MALFORMED (-1) /* not a reply this request can get */
#define PEER_WIRE_OUTSIDE (-2)   /* block runs outside the home's segment */
struct peer_wire_rec {
	struct peer_fetch_r h;
	const void *runs; /* h.nruns struct peer_run, read with peer_wire_run */
};
int peer_wire_fetch_r(const void *data, size_t len, uint32_t node, uint64_t req, uint32_t nitems, uint64_t nblocks,
		      struct peer_wire_rec *recs);
struct peer_run peer_wire_run(const void *runs, uint32_t k);

int peer_wire_done(const void *data, size_t len, int nnodes, struct peer_done *d);

/* CLAIM from another node of the cluster: a group of at least one file,
 * known flags. */
int peer_wire_claim(const void *data, size_t len, int nnodes, int self, struct peer_claim *c);
/* CLAIM_R from another node: granted is 0 or 1, and exactly r->nsync
 * (at most PEER_CLAIM_SYNC_MAX) path hashes follow, copied to `sync`. */
int peer_wire_claim_r(const void *data, size_t len, int nnodes, int self, struct peer_claim_r *r, uint64_t *sync);
/* ... and against the claim it answers: never an epoch older than the
 * one claimed (`epoch`, known to the requester). */
int peer_wire_claim_r_fits(const struct peer_claim_r *r, uint32_t epoch);

/* FILES: the header, then entries one by one from *cursor (just after the
 * header): 0 with the entry and its path (fe->len bytes, no NUL), or -1
 * when the message ends inside an entry. */
int peer_wire_files_head(const void *data, size_t len, int nnodes, int self, struct peer_files *h);
int peer_wire_files_next(const char **cursor, const char *end, struct peer_file_ent *fe, const char **path);

#endif
