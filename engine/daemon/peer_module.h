/* The coordinator's door to the multi-node cache. The UCX transport lives
 * in a module (dlshimd-peers.so, engine/daemon/peers/) that is loaded only
 * when DLSHIM_PEERS is set: linking UCX into every coordinator would put
 * its memory hooks (mmap, madvise, ...) into single-node runs too. */
#ifndef DLSHIM_PEER_MODULE_H
#define DLSHIM_PEER_MODULE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "dlshim/proto.h"

struct session;

/* Remote files have no local (dev, ino): this device number, never a real
 * one, and a hash of the path stand in for them in the engine's catalog
 * (the same identity in exact mode's remote_open and in redirect datasets). */
#define PEER_REMOTE_DEV 0xd15d000000000000ULL
static inline uint64_t peer_path_hash(const char *p)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	return h;
}

/* One file of a remote fetch: where its bytes go (the local slot being
 * loaded) and, on return, whether they arrived. */
struct peer_item {
	const char *path;
	uint64_t size;
	int64_t mtime_ns;
	const struct iovec *iov;
	int niov;
	uint32_t item;          /* engine item (for prefetch-hit accounting) */
	int got;
};

/* Load the module and start the transport when peers are configured.
 * 1: no peers; 0: started; -1: not available (logged, in peer_module_json). */
int peer_module_start(void);
int peer_module_enabled(void);
/* As remote_open (peers/peer.h); -1 when multi-node is off. */
int peer_module_remote_open(struct session *s, const char *path, struct dlshim_msg_open_r *r, int *sfd);
/* Every file some peer is home for (and this node is not): for redirect
 * datasets, which span the cluster. */
void peer_module_remote_files(void (*fn)(void *ctx, const char *path, uint64_t size, int64_t mtime_ns), void *ctx);
/* A remote file's size and mtime as its home listed it, and the nodes
 * holding it (bit mask); -1 when unknown. */
int peer_module_lookup(const char *path, uint64_t *size, int64_t *mtime_ns, uint64_t *holders);
/* DLSHIM_PREFETCH: files a home may add to a reply (0 = off). */
int peer_module_prefetch(void);
/* Fetch it[0] (on demand) for session `s` (bounded in-flight per client);
 * it[1..n-1] are prefetch candidates the home may add if they are resident
 * there. 0 when it[0] arrived; it[k].got says which candidates did. */
int peer_module_fetch(struct session *s, struct peer_item *it, int n, char *why, size_t whylen);
/* A job spanning nodes may serve `path` of label group `group` in its view
 * of the group's epoch, `epoch` (path NULL: a re-open; is that epoch still
 * current?). See peers/peer_claims.c: 1 granted in epoch *at, 0 refused
 * (held, or moved on, in epoch *at), -1 not verifiable (the group's
 * authority is unreachable), -2 multi-node is off (nothing to ask).
 * `sync` (room for PEER_MODULE_SYNC_MAX) receives *nsync path hashes of
 * the group's files other nodes took in epoch *at. */
#define PEER_MODULE_SYNC_MAX 64 /* = PEER_CLAIM_SYNC_MAX */
int peer_module_claim(const char *job, const char *group, uint32_t size, const char *path, uint32_t epoch,
		      uint32_t *at, uint64_t *sync, uint32_t *nsync);
/* An item was served to a client: a prefetch hit if it came as a prefetch. */
void peer_module_note_served(uint32_t item);
/* The "peers" object of the stats JSON. */
size_t peer_module_json(char *buf, size_t cap);

/* Names of the verbs devices on this machine, comma-separated ("" when none
 * or libibverbs is absent; it is loaded at run time). rdma_devs.c. */
const char *rdma_devices(void);

/* `s` made safe inside a JSON string (quotes, backslashes, controls -> ?). */
void peer_json_str(char *out, size_t cap, const char *s);

#endif
