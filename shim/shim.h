/* Internal interfaces of the preloaded shim: process state, the table of
 * routed descriptors and the client side of the coordinator protocol. */
#ifndef DLSHIM_SHIM_H
#define DLSHIM_SHIM_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "dlshim/config.h"
#include "dlshim/shm.h"

#define SHIM_HIDDEN __attribute__((visibility("hidden")))

/* ---- process state (state.c) ---- */
extern struct dlshim_config g_cfg;
/* 1 when roots are configured and valid: the only check an unrouted call pays. */
extern int g_active;
/* Set while the shim itself runs, so its own I/O never re-enters a wrapper. */
extern __thread int g_in_shim;
extern pid_t g_job_owner_pid;

void shim_init(void);
/* crash.c: backtraces on fatal signals when DLSHIM_LOG=debug. */
void crash_install(void);
enum warn_cause { W_CONFIG, W_CONNECT, W_LOST, W_SPAWN, W_SHM, W_PROTO, W_STATS, W_DSA, W_PEERS, W_MEMCAP, W_ROWS_PARTIAL, W_MAX };
void shim_warn(enum warn_cause c, const char *fmt, ...) __attribute__((format(printf, 2, 3), cold));
int shim_warned(enum warn_cause c);
void shim_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* getpid(), asked of the kernel only once per process (shim/pid.c). */
pid_t shim_pid(void);

/* ---- routed descriptors (fdtable.c) ---- */

/* What a routed descriptor reads from the cache. Several descriptors may
 * share one route after dup(); routes are recycled, never unmapped, so a
 * racing reader never touches freed memory (and validates the slot anyway). */
struct route {
	atomic_uint refs;
	uint32_t slot;
	uint64_t gen;
	uint64_t size;
	const struct dlshim_shm_view *view;
	pid_t owner;                   /* process whose session holds the pin */
	int fast;                      /* found through the shared index: no pin, report at close */
	uint64_t dev, ino, fsize;      /* the file (reported with a fast hit) */
	int64_t mtime_ns;
	uint64_t session;              /* that session's id */
	atomic_ullong bytes_cache, bytes_pass;
	atomic_flag cur_lock;          /* guards cur; readers that miss it skip the cursor */
	struct dlshim_shm_cursor cur;
	struct route *next_free;
};

extern struct route *_Atomic *g_fdt;
extern atomic_int g_fdt_size;

static inline struct route *fdt_get(int fd)
{
	if ((unsigned)fd >= (unsigned)atomic_load_explicit(&g_fdt_size, memory_order_relaxed))
		return NULL;
	return atomic_load_explicit(&g_fdt[fd], memory_order_acquire);
}
/* Install `r` at `fd` (taking a reference). Returns 0, or -1 when fd is
 * beyond the table (the descriptor then simply passes through). */
int fdt_set(int fd, struct route *r);
/* Remove and return the route at `fd` (the caller drops its reference). */
struct route *fdt_take(int fd);
struct route *route_new(void);
/* Drop one reference; the last one releases the pin to the coordinator. */
void route_put(struct route *r);
/* Copy from the cache; -1 means "read the real descriptor instead". */
ssize_t route_read(struct route *r, uint64_t off, void *buf, size_t len);
void fdt_drop_all(void);
void fdt_atfork_prepare(void);
void fdt_atfork_parent(void);
void fdt_atfork_child(void);

/* ---- coordinator client (client.c) ---- */

/* Ask the coordinator for the file open at `fd` (already fstat'ed in `st`).
 * Returns a route to read from, or NULL to pass through. */
struct route *client_open(int fd, const struct stat *st);
/* Copy rows [row, row + n) of dataset `dset` in the HDF5 file `path`
 * (stat'ed in `st`; `nrows` rows of `row_bytes`) from the cache into `dst`,
 * redirected when `redirect` and n == 1. 0 when every byte was served; -1:
 * the caller reads them itself, and then reads row *served (set to `row`
 * unless the coordinator redirected it) so the pairing holds. */
int client_rows(const char *path, const char *dset, const struct stat *st, uint64_t nrows, uint64_t row_bytes,
		uint64_t row, uint64_t n, int redirect, void *dst, uint64_t *served);
/* Open `path` (normalised, absent locally) through a peer node: returns a
 * new descriptor (read-only, holding the file's bytes) and its route, or -1. */
int client_open_remote(const char *path, int flags, struct route **out);
/* Report row reads served through the shared index (batched). */
void client_rows_flush(void);
/* Release a pin (or only report bytes when r->slot is UINT32_MAX). */
void client_release(const struct route *r, uint64_t bytes_cache, uint64_t bytes_pass);
void client_release_slot(uint32_t slot, uint64_t gen);
/* Write the job's JSON summary to `path` (DLSHIM_STATS). */
/* The job's stats JSON from the coordinator (NUL-terminated); length or -1. */
long client_fetch_stats(char *buf, size_t cap);
int client_write_stats(const char *path, const char *json, size_t len);
void client_atfork_prepare(void);
void client_atfork_parent(void);
void client_atfork_child(void);
uint64_t client_session_id(void);

#endif
