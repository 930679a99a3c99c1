/* The coordinator around the engine: one mutex guards the engine and the
 * sessions; each connection has a thread; loader threads do the disk reads. */
#ifndef DLSHIM_DAEMON_H
#define DLSHIM_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <uthash.h>

#include "dlshim/config.h"
#include "dlshim/engine.h"

struct pin {
	uint32_t slot;
	uint64_t gen;
};

/* All connections of one client process share a session: its job
 * attachment and its pins, released together when the last one closes. */
struct session {
	uint64_t id;
	uint32_t pid;
	int job;
	int conns;
	int remote_inflight;    /* fetches from peers under way for it (bounded) */
	struct pin *pins;
	size_t npins, cap;
	UT_hash_handle hh;
};

struct daemon {
	struct dlshim_config cfg;
	pthread_mutex_t mu;
	pthread_cond_t loaded;  /* broadcast when any load finishes */
	struct dlshim_engine *eng;
	int shm_fd;
	size_t shm_len;
	uint64_t memcg_limit;    /* set when the cache was capped below DLSHIM_CACHE for it */
	void *shm_base;         /* the coordinator's read-write mapping (registered for RMA) */
	uint64_t segment_id;
	struct session *sessions;
	int nclients;           /* live client connections (not CLI) */
	time_t idle_since;
	time_t job_idle_since[DLSHIM_ENGINE_MAX_JOBS];
	pid_t job_owner[DLSHIM_ENGINE_MAX_JOBS]; /* the job's first process, 0 = unknown */
	uint8_t job_spans[DLSHIM_ENGINE_MAX_JOBS]; /* a session said its ranks run on several nodes */
	uint64_t claims_refused[DLSHIM_ENGINE_MAX_JOBS]; /* decisions another node of the job had taken */
	struct job_spec {                        /* what DATASET declared, for rescans */
		char *roots, *list;
		uint32_t redirect, chunk;
	} spec[DLSHIM_ENGINE_MAX_JOBS];
	time_t started;
	atomic_int stopping;     /* set by a STOP request, read by the accept loop */
	int listen_fd;
	int log_fd;
};

extern struct daemon D;

/* Seconds a job without processes keeps its state (epoch, consumption)
 * while its first process is alive; a job whose first process is gone ends
 * as soon as its last session does. */
#define JOB_LINGER_S 15

void dlog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* slot_fd.c: a sealed, read-only memfd holding the bytes of a published
 * slot (a file that exists only in the cache, fetched from a peer), with
 * `mtime_ns` as its mtime; -1 if the slot changed or on error. */
int slot_memfd(uint32_t slot, uint64_t gen, uint64_t size, int64_t mtime_ns);

/* server.c */
void *conn_thread(void *arg);
/* dlshim_engine_open for `job`, waiting (at most 5 s, then deciding without
 * waiting) while the file is being loaded by someone else: never returns
 * WAIT. Called and returns with D.mu held. */
void daemon_engine_open(int job, const struct dlshim_file_id *id, unsigned flags, struct dlshim_open_result *res);

/* loader.c: read `size` bytes of `fd` into the slot being loaded, in the
 * calling thread (a single file: no hand-off); 0 or -1. */
int loader_start(int nthreads);
int loader_load_now(int fd, uint32_t slot, uint64_t size);
/* Load res->load_item[] in the background (each pinned for the loader);
 * published and released when all are read. Takes ownership of fds. */
void loader_load_ahead(int job, const struct dlshim_open_result *res, const int *fds);
void loader_load_batch(const int *fd, const uint32_t *slot, const uint64_t *size, int *rc, uint32_t n);
struct extent_read_stats;
void loader_extent_stats(struct extent_read_stats *out);

/* stats_json.c: the JSON state; `job` >= 0 gives that job's object only. */
size_t stats_json(char *buf, size_t cap, int job);

#endif
