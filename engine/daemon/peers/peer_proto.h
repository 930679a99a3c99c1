/* Coordinator <-> coordinator messages (UCX active messages).
 *
 * Control travels as active messages; file bytes never do: the requester
 * reads them with RMA gets from the home's registered cache segment. Every
 * message starts with the sender's node index so a handler knows whom to
 * answer (replies go over the receiver's own endpoint to the sender).
 * All integers are little-endian host order (the cluster is homogeneous);
 * every field is validated by the receiver (peer.c) before use.
 */
#ifndef DLSHIM_PEER_PROTO_H
#define DLSHIM_PEER_PROTO_H

#include <stdint.h>

#define PEER_MAGIC 0x4e534c44u /* "DLSN" */
#define PEER_VERSION 3u /* 3: CLAIM, CLAIM_R */
#define PEER_PREFETCH_MAX 32 /* prefetch candidates in one FETCH */
#define PEER_MAX_NODES 64
#define PEER_MSG_MAX (1u << 20)

enum peer_am_id {
	PEER_AM_HELLO = 1,  /* who I am, where my cache is, its rkey; asks for a HELLO back */
	PEER_AM_FILES,      /* part of my local file list */
	PEER_AM_FETCH,      /* requester -> home: put this file in your cache, tell me where;
			       add these candidates if they are already there */
	PEER_AM_FETCH_R,    /* home -> requester: status and block runs of the pinned slots */
	PEER_AM_DONE,       /* requester -> home: the gets are over, unpin them all */
	PEER_AM_CLAIM,      /* node -> a file's claim authority: may my part of a job that
			       spans nodes serve this file in this group epoch? */
	PEER_AM_CLAIM_R,    /* authority -> node: granted, or the epoch that holds it */
	PEER_AM_MAX
};

struct peer_hello {
	uint32_t magic, version;
	uint32_t node, nnodes;
	uint64_t incarnation;  /* random per coordinator start: a restarted peer is a new one */
	uint64_t base;         /* address of the home's mapped segment (RMA target) */
	uint64_t data_off;     /* offset of the block area in the segment */
	uint64_t nblocks;
	uint32_t block_size;
	uint32_t want_reply;   /* 1: answer with your own HELLO (we may have missed it) */
	uint32_t rkey_len;     /* packed rkey bytes follow */
	uint32_t pad;
};

/* Followed by `count` entries, each struct peer_file_ent + `len` path bytes
 * (absolute path under a root, no NUL). */
struct peer_files {
	uint32_t node, count;
	uint64_t incarnation;
};
struct peer_file_ent {
	uint64_t size;
	int64_t mtime_ns;
	uint32_t len;
} __attribute__((packed));

/* Followed by 1 + ncand absolute paths, each with a NUL: the file wanted
 * on demand, then prefetch candidates (upcoming files of the requester's
 * job that it does not hold; each has a free local slot waiting). */
struct peer_fetch {
	uint32_t node, ncand;
	uint64_t req;
};

/* A FETCH_R is one or more records, each this header followed by `nruns`
 * struct peer_run (block index runs, in file order). The first record is
 * the wanted file (index 0, status says whether it can be served); then one
 * record per candidate sent (index k = the k-th candidate, status 0). */
struct peer_fetch_r {
	uint32_t node;
	int32_t status;        /* 0, or an errno value saying why the home cannot serve it */
	uint64_t req;
	uint64_t size;
	int64_t mtime_ns;
	uint64_t gen;          /* the pinned generation, echoed in DONE */
	uint32_t slot, nruns;
	uint32_t index, pad;
};
struct peer_run {
	uint32_t first, count;
};

struct peer_done {
	uint32_t node, slot;
	uint64_t req;
	uint64_t gen;
};

/* A job spanning nodes is named by a hash of its name, a label group by a
 * hash of its key, a file by a hash of its path (all the same on every
 * node: the roots are mounted at the same paths). */
#define PEER_CLAIM_F_CURRENT 1u /* no file: is `epoch` still the group's epoch? (a re-open) */
struct peer_claim {
	uint32_t node;
	uint32_t epoch;        /* the requester's view of the group's epoch */
	uint64_t req;
	uint64_t job, group, file;
	uint32_t size;         /* files in the group */
	uint32_t flags;        /* PEER_CLAIM_F_* */
};

/* Followed by `nsync` uint64 path hashes: files of the group that other
 * nodes took in `epoch` since the requester last asked (it marks them
 * consumed, so its next decisions avoid them). */
#define PEER_CLAIM_SYNC_MAX 64
struct peer_claim_r {
	uint32_t node;
	uint32_t granted;      /* 1: granted (current); 0: refused (moved on) */
	uint64_t req;
	uint32_t epoch;        /* the epoch it was granted or is held in (>= the one asked) */
	uint32_t nsync;
};

#endif
