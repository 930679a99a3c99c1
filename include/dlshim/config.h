/* dlshim configuration: parsed from the environment by the shim, the daemon
 * and the CLI alike, so that all three agree on what a value means.
 *
 * Contract: dlshim_config_parse() never aborts and never allocates through
 * interposed functions; on a bad value it fills `err` with one message naming
 * the variable and the accepted values and returns -1. The caller decides
 * what to do (the shim falls back to pass-through for the process).
 */
#ifndef DLSHIM_CONFIG_H
#define DLSHIM_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define DLSHIM_MAX_ROOTS 16
#define DLSHIM_PATH_MAX 4096
#define DLSHIM_JOB_MAX 128

enum dlshim_redirect { DLSHIM_REDIRECT_OFF = 0, DLSHIM_REDIRECT_DIR, DLSHIM_REDIRECT_ANY };
enum dlshim_sampler { DLSHIM_SAMPLER_CHUNK = 0, DLSHIM_SAMPLER_DSA };
enum dlshim_evict { DLSHIM_EVICT_REFCNT = 0, DLSHIM_EVICT_LRU, DLSHIM_EVICT_FIFO, DLSHIM_EVICT_RANDOM };
enum dlshim_log { DLSHIM_LOG_ERROR = 0, DLSHIM_LOG_WARN, DLSHIM_LOG_INFO, DLSHIM_LOG_DEBUG };

struct dlshim_config {
	int disabled;                          /* DLSHIM_DISABLE=1 */
	int nroots;                            /* DLSHIM_ROOTS, normalised absolute paths */
	char roots[DLSHIM_MAX_ROOTS][DLSHIM_PATH_MAX];
	size_t root_len[DLSHIM_MAX_ROOTS];
	enum dlshim_redirect redirect;         /* DLSHIM_REDIRECT */
	enum dlshim_sampler sampler;           /* DLSHIM_SAMPLER */
	enum dlshim_evict evict;               /* DLSHIM_EVICT */
	uint64_t cache_bytes;                  /* DLSHIM_CACHE, resolved against RAM */
	uint32_t chunk;                        /* DLSHIM_CHUNK, 0 = auto */
	char filelist[DLSHIM_PATH_MAX];        /* DLSHIM_FILELIST, "" = none */
	char job[DLSHIM_JOB_MAX];              /* DLSHIM_JOB, "" = derive */
	int job_spans;                         /* DLSHIM_JOB_SPAN resolved: the job's ranks run on several
						  nodes (auto: torchrun's WORLD_SIZE > LOCAL_WORLD_SIZE) */
	uint64_t seed;                         /* DLSHIM_SEED */
	int seed_set;
	char runtime_dir[DLSHIM_PATH_MAX];     /* DLSHIM_RUNTIME_DIR or the per-user default */
	enum dlshim_log log_level;             /* DLSHIM_LOG */
	char stats_path[DLSHIM_PATH_MAX];      /* DLSHIM_STATS, "" = none */
	uint64_t max_item_bytes;               /* DLSHIM_MAX_ITEM: larger files pass through */
	uint32_t idle_exit_s;                  /* DLSHIM_IDLE_EXIT: daemon idle timeout */
	int extent_reads;                      /* DLSHIM_EXTENT_READS: auto (1) or off (0) */
	char daemon_path[DLSHIM_PATH_MAX];     /* DLSHIM_DAEMON: explicit dlshimd binary */
	char peers[DLSHIM_PATH_MAX];           /* DLSHIM_PEERS (multi-node, not yet used) */
	char node[DLSHIM_JOB_MAX];             /* DLSHIM_NODE */
};

/* Look-up function so tests can feed an environment without setenv(). */
typedef const char *(*dlshim_getenv_fn)(const char *name);

/* Parse the whole configuration. `ram_bytes` resolves percentages in
 * DLSHIM_CACHE (pass 0 to query the system). Returns 0, or -1 with `err`
 * holding a message such as
 *   "DLSHIM_REDIRECT='xyz' is not valid: expected off, dir or any". */
int dlshim_config_parse(struct dlshim_config *cfg, dlshim_getenv_fn get, uint64_t ram_bytes,
			char *err, size_t errlen);

/* Parse a size such as "512M", "8G", "1048576", "50%" (of ram_bytes).
 * Returns 0 or -1 on garbage, zero, negative or overflowing values. */
int dlshim_parse_size(const char *s, uint64_t ram_bytes, uint64_t *out);

/* True when `path` (absolute, normalised) is inside one of the roots. */
int dlshim_config_path_routed(const struct dlshim_config *cfg, const char *path, size_t len);

/* Normalise `in` (absolute or relative to `cwd`) lexically: collapse "//",
 * "/./" and "/../". Returns length or -1 when the result does not fit. */
long dlshim_path_normalize(const char *cwd, const char *in, char *out, size_t outlen);

const char *dlshim_redirect_name(enum dlshim_redirect r);
const char *dlshim_sampler_name(enum dlshim_sampler s);
const char *dlshim_evict_name(enum dlshim_evict e);

#endif
