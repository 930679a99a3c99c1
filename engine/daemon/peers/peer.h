/* Multi-node cache: membership, the UCX transport, the cluster-wide file
 * catalog and both sides of a remote fetch. All of it is off (and costs
 * nothing) unless DLSHIM_PEERS is set; any failure here leaves the node
 * serving its local data. */
#ifndef DLSHIM_PEER_H
#define DLSHIM_PEER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "dlshim/proto.h"
#include "peer_proto.h"
#include "../peer_module.h" /* struct peer_item; rdma_devices(), in the coordinator itself */

struct session;

/* Remote requests one client process may have in flight at once: bounds
 * the incast a single job can cause on a home node. */
#define PEER_INFLIGHT_PER_CLIENT 4

/* ---- membership (peer_members.c) ---- */
struct peer_addr {
	char host[256];
	char port[8];
	char name[272];        /* host:port as written in DLSHIM_PEERS */
};
/* Parse DLSHIM_PEERS ("host:port,host:port,...") and DLSHIM_NODE (an index
 * into that list, host:port or host). Returns the node count and sets
 * *self, or -1 with `err` saying what is wrong. */
int peer_parse_members(const char *peers, const char *node, struct peer_addr *out, int max, int *self,
		       char *err, size_t errlen);

/* ---- transport (peer.c) ---- */
/* Start membership and UCX (own thread). Returns 0 when multi-node is on,
 * 1 when it is off (no DLSHIM_PEERS), -1 on an error already logged (the
 * node then serves locally). */
int peer_start(void);
int peer_enabled(void);
int peer_self(void);        /* this node's index */
int peer_nnodes(void);      /* nodes in DLSHIM_PEERS */
int peer_node_up(int i);    /* another node, connected and introduced */
/* Hand `msg` (malloc'ed; ownership passes) to the transport thread for
 * `node`; dropped if the node is down. */
void peer_queue_send(int node, unsigned id, void *msg, size_t len);
/* Fetch it[0] from a reachable node that holds it into the local slot being
 * loaded (it[0].iov). it[1..n-1] are prefetch candidates: those held by the
 * same node (at most DLSHIM_PREFETCH of them) go in the same request, and
 * the home adds the ones resident in its cache to its reply; it[k].got says
 * which arrived. Blocks until done. 0 when it[0] arrived, or -1 with `why`
 * saying which node failed and how. */
int peer_fetch_items(struct peer_item *it, int n, char *why, size_t whylen);
/* DLSHIM_PREFETCH: prefetch candidates per request (0 = off). */
int peer_prefetch_k(void);
/* The multi-node part of the stats JSON (an object, no trailing comma). */
size_t peer_json(char *buf, size_t cap);
/* Counters kept by the requester side. */
void peer_count_remote(int ok, uint64_t bytes, int local_hit);
void peer_note_served(uint32_t item);

/* ---- catalog (peer_catalog.c) ---- */
/* Scan the local roots once: the files this node is home for. */
long peer_catalog_scan_local(const char *roots);
/* Encode the local list into FILES messages of at most PEER_MSG_MAX bytes;
 * calls `fn` for each. */
void peer_catalog_encode_local(uint32_t node, uint64_t incarnation, void (*fn)(void *ctx, void *msg, size_t len),
			       void *ctx);
/* Add the entries of a FILES message from `node`; -1 when malformed. */
int peer_catalog_add_msg(int node, const void *msg, size_t len);
/* A file some node is home for: size, mtime and the nodes holding it. */
int peer_catalog_find(const char *path, uint64_t *size, int64_t *mtime_ns, uint64_t *holders);
/* Is `path` one of this node's own files (and its size/mtime)? */
int peer_catalog_local(const char *path, uint64_t *size, int64_t *mtime_ns);
long peer_catalog_count(int node);
/* Every remote file (held by a peer, not by this node). */
void peer_catalog_foreach_remote(void (*fn)(void *ctx, const char *path, uint64_t size, int64_t mtime_ns), void *ctx);   /* files known on `node` (-1: this node's local list) */

/* ---- home side (peer_home.c) ---- */
int peer_home_start(void);
/* Queue a FETCH from `node` for `paths` (paths[0] on demand, the others
 * prefetch candidates, sent only if resident); the answer goes back through
 * peer_send_fetch_r. */
void peer_home_request(int node, uint64_t req, const char *const *paths, int npaths);
/* DONE from the requester, or its deadline: unpin. */
void peer_home_done(int node, uint64_t req, uint32_t slot, uint64_t gen);
void peer_home_expire(int node_or_all);
/* "served":{...} counters of what this node sent to peers, with a trailing comma-free body. */
size_t peer_home_json(char *buf, size_t cap);
/* Called by the home threads: hand a FETCH_R (malloc'ed, ownership passes) to the transport. */
void peer_send_fetch_r(int node, void *msg, size_t len);

/* ---- claims of jobs that span nodes (peer_claims.c) ---- */
int peer_claims_start(void);
/* May this node serve `path` (of label group `group`, `size` files) to its
 * part of job `job` in its view of the group's epoch, `epoch`? With `path`
 * NULL: is `epoch` still the group's epoch (a re-open)? 1 granted (or
 * current) in epoch *at (>= epoch: catch up when later), 0 refused (held,
 * or moved on, in epoch *at), -1 when the group's authority cannot be
 * asked (unreachable, no answer in CLAIM_TIMEOUT_S: the caller serves it
 * unverified). `sync` (room for PEER_CLAIM_SYNC_MAX) receives *nsync path
 * hashes of files other nodes took in epoch *at (claim_table.h). Blocks. */
int peer_claim(const char *job, const char *group, uint32_t size, const char *path, uint32_t epoch, uint32_t *at,
	       uint64_t *sync, uint32_t *nsync);
/* Transport thread: a CLAIM to decide, a CLAIM_R to hand to its waiter. */
void peer_claims_on_claim(const void *data, size_t len);
void peer_claims_on_reply(const void *data, size_t len);
/* Node `i` went down: its unanswered claims fail now. */
void peer_claims_node_down(int i);
/* "claims":{...} of the stats JSON. */
size_t peer_claims_json(char *buf, size_t cap);

/* ---- requester side (remote_open.c) ---- */
/* peer_fetch_items with the per-client in-flight bound. */
int remote_fetch(struct session *s, struct peer_item *it, int n, char *why, size_t whylen);
/* A local client opened `path`, absent locally. Fill `r` (HIT) and *sfd (a
 * read-only descriptor holding the file's bytes), or return -1 (absent
 * everywhere, or its home is unreachable: logged with the reason). */
int remote_open(struct session *s, const char *path, struct dlshim_msg_open_r *r, int *sfd);


#endif
