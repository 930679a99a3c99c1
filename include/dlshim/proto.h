/* Client <-> coordinator protocol over a unix SOCK_SEQPACKET socket.
 *
 * Every message is one packet: a fixed header followed by a payload whose
 * layout depends on `type`. All integers are fixed-width in host order (both
 * ends run on one machine); sizes and offsets are 64-bit. Bulk data never
 * crosses the socket: replies carry slot indices into the shared segment,
 * whose descriptor travels once with SCM_RIGHTS. Encoding and decoding live
 * in engine/proto.c, linked by both sides and fuzzed.
 */
#ifndef DLSHIM_PROTO_H
#define DLSHIM_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define DLSHIM_PROTO_MAGIC 0x31534c44u /* "DLS1" */
#define DLSHIM_PROTO_VERSION 3u /* 2: OPEN carries the ctime; 3: ROWS leases */
#define DLSHIM_MSG_MAX (256u * 1024u)

enum dlshim_msg_type {
	DLSHIM_MSG_HELLO = 1,     /* c->d: who I am; reply HELLO_OK + segment fd */
	DLSHIM_MSG_HELLO_OK,
	DLSHIM_MSG_OPEN,          /* c->d: open a file by identity; reply OPEN_R */
	DLSHIM_MSG_OPEN_R,
	DLSHIM_MSG_LOADFD,        /* c->d: descriptor of the file to load (after NEED_FD) */
	DLSHIM_MSG_RELEASE,       /* c->d: drop a pin; no reply */
	DLSHIM_MSG_STATS,         /* c->d: ask for the JSON state; reply TEXT */
	DLSHIM_MSG_TEXT,
	DLSHIM_MSG_STOP,          /* c->d: shut down; reply TEXT */
	DLSHIM_MSG_ERROR,         /* d->c: request refused; payload is a message */
	DLSHIM_MSG_DATASET,       /* c->d: declare the job's dataset (struct dlshim_msg_dataset + text); reply TEXT */
	DLSHIM_MSG_ROWS,          /* c->d: rows of an HDF5 dataset (struct dlshim_msg_rows + names); reply ROWS_R */
	DLSHIM_MSG_ROWS_R,
	DLSHIM_MSG_OPEN_PATH,     /* c->d: open a path absent locally (multi-node); payload path + NUL; reply OPEN_R */
	DLSHIM_MSG_TYPE_MAX
};

struct dlshim_msg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len;             /* payload bytes after the header */
	uint32_t seq;             /* echoed in the reply */
};

#define DLSHIM_HELLO_CLIENT 0u  /* a shim session */
#define DLSHIM_HELLO_CONTROL 1u /* the CLI: attaches to no job */

struct dlshim_msg_hello {
	uint32_t pid;
	uint32_t kind;            /* DLSHIM_HELLO_* */
	uint64_t session;         /* same for every connection of one process */
	char job[128];            /* NUL-terminated */
	uint32_t job_owner;       /* pid of the job's first process (DLSHIM_JOB_OWNER), 0 = unknown */
	uint32_t flags;           /* DLSHIM_HELLO_F_* (0 from clients that predate them) */
};

/* The job's ranks run on several nodes (DLSHIM_JOB_SPAN): its coordinators
 * claim each file before serving it, so each is served once per epoch
 * across the nodes. */
#define DLSHIM_HELLO_F_SPANS 1u

/* The cache is smaller than DLSHIM_CACHE asked: the coordinator's memory
 * cgroup limit would not hold it (shm_len is what it got). */
#define DLSHIM_HELLO_OK_F_MEMCAP 1u

struct dlshim_msg_hello_ok {
	uint32_t daemon_pid;
	uint32_t flags;           /* DLSHIM_HELLO_OK_F_* */
	uint64_t segment_id;
	uint64_t shm_len;
};

struct dlshim_msg_open {
	uint64_t dev, ino, size;
	int64_t mtime_ns;
	int64_t ctime_ns;         /* with size and mtime: which version of the file */
};

enum dlshim_open_status {
	DLSHIM_OPEN_R_HIT = 1,    /* served from slot/gen */
	DLSHIM_OPEN_R_PASS,       /* read the real file */
	DLSHIM_OPEN_R_NEED_FD,    /* send LOADFD with the descriptor, then wait for OPEN_R */
	DLSHIM_OPEN_R_ABSENT,     /* OPEN_PATH: on no reachable node (the client keeps its ENOENT) */
};

#define DLSHIM_OPEN_R_F_FD 1u /* a descriptor of the served (redirected) file accompanies */

struct dlshim_msg_open_r {
	uint32_t status;
	uint32_t item;
	uint32_t slot;
	uint32_t flags;
	uint64_t gen;
	uint64_t size;
};

#define DLSHIM_RELEASE_F_FAST 1u /* the open was a hit through the shared index: account it */
/* `item` HDF5 row reads served through the index, `bytes_cache` their
 * bytes; `gen` row reads (any way) served another row than asked. */
#define DLSHIM_RELEASE_F_ROWS 2u

struct dlshim_msg_release {
	uint32_t item;
	uint32_t slot;            /* UINT32_MAX: a routed file read without the cache */
	uint64_t gen;
	uint64_t bytes_cache;
	uint64_t bytes_pass;
	uint64_t dev, ino, size;  /* the file (for F_FAST) */
	int64_t mtime_ns;
	uint32_t flags;
	uint32_t pad;
};

/* Followed by the roots (comma-separated, as in DLSHIM_ROOTS), a NUL, the
 * file list path (may be empty) and a NUL. */
struct dlshim_msg_dataset {
	uint32_t redirect;        /* enum dlshim_redirect */
	uint32_t sampler;         /* enum dlshim_sampler */
	uint32_t chunk;           /* files per chunk, 0 = auto */
	uint32_t pad;
};

/* Followed by the file's absolute path, a NUL, the dataset's name in the
 * file and a NUL. The coordinator opens the file itself and checks that it
 * is still (dev, ino, size, mtime) before reading rows from it. */
struct dlshim_msg_rows {
	uint64_t dev, ino, size;
	int64_t mtime_ns;
	uint64_t nrows;           /* first dimension of the dataset */
	uint64_t row_bytes;       /* bytes of one row in the dataset's own type */
	uint64_t row;             /* the row asked for */
	uint64_t count;           /* rows wanted from `row` on (the reply may cover fewer) */
	uint32_t redirect;        /* enum dlshim_redirect of the job */
	uint32_t chunk;           /* DLSHIM_CHUNK (rows per chunk), 0 = auto */
	uint32_t flags;           /* DLSHIM_ROWS_F_* */
	uint32_t pad;
};
/* The client can take a lease of decided rows on this connection (redirect
 * mode): the reply fills it (and passes its memory the first time). */
#define DLSHIM_ROWS_F_LEASE 1u
/* `row` is a served row the client took from its lease: read it in the
 * redirect plan's chunking, decide nothing. */
#define DLSHIM_ROWS_F_LEASED 2u

/* HIT: row `served` (== `row` unless redirected) is at byte
 * (served - first) * row_bytes of the item in slot/gen, which holds rows
 * [first, first + count). Not pinned (one message per read): the client's
 * seqlock check catches a slot reused meanwhile. PASS: read row `served`
 * yourself. */
struct dlshim_msg_rows_r {
	uint32_t status;          /* DLSHIM_OPEN_R_HIT or DLSHIM_OPEN_R_PASS */
	uint32_t slot;
	uint64_t gen;
	uint64_t size;            /* bytes of the item */
	uint64_t first, count;
	uint64_t served;
	uint64_t chunk_rows;      /* the dataset's rows per item: lets the client find later chunks in the index */
	uint32_t flags;           /* DLSHIM_ROWS_R_* */
	uint32_t lease_count;     /* entries in it (<= DLSHIM_LEASE_ROWS) */
};
/* The connection's lease was refilled (its memory fd comes with the first). */
#define DLSHIM_ROWS_R_LEASE 1u
/* The job's last epoch left many rows of the file unasked: it reads part
 * of the file, and redirect serves it rows of the rest (warn the user). */
#define DLSHIM_ROWS_R_PARTIAL 2u

/* Encode a message into `buf` (at least sizeof hdr + len). Returns the
 * packet length. */
size_t dlshim_msg_encode(void *buf, uint16_t type, uint32_t seq, const void *payload, uint32_t len);

/* Validate a received packet of `n` bytes: magic, version, known type,
 * declared length equal to the packet and to the type's payload size (TEXT,
 * ERROR and STATS/STOP have variable or empty payloads). Returns 0 and sets
 * *hdr and *payload, or -1 with `why` naming the problem. */
int dlshim_msg_decode(const void *buf, size_t n, struct dlshim_msg_hdr *hdr, const void **payload,
		      const char **why);

#endif
