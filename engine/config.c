/* dlshim configuration parsing (see include/dlshim/config.h).
 *
 * This file is linked into the LD_PRELOAD library, so it allocates nothing,
 * does no stdio file I/O and calls none of the functions the shim interposes
 * (open, read, stat, ...): the RAM size comes from sysconf() and the one
 * directory check uses the statx system call directly.
 *
 * Accepted values (keywords are case-insensitive):
 *   DLSHIM_DISABLE      0 or 1 (empty = 0)
 *   DLSHIM_ROOTS        comma-separated absolute paths, normalised lexically;
 *                       empty entries skipped, duplicates dropped, at most
 *                       DLSHIM_MAX_ROOTS; "/" allowed (routes everything)
 *   DLSHIM_REDIRECT     off | dir | any                      (default off)
 *   DLSHIM_SAMPLER      chunk | dsa                          (default chunk)
 *   DLSHIM_EVICT        refcnt | lru | fifo | random         (default refcnt)
 *   DLSHIM_CACHE        size, see dlshim_parse_size()        (default 25%)
 *   DLSHIM_MAX_ITEM     size                                 (default 64M)
 *                       always capped at cache_bytes / 4
 *   DLSHIM_CHUNK        auto | 1..1048576                    (default auto = 0)
 *   DLSHIM_SEED         unsigned 64-bit decimal or 0x-hex    (sets seed_set)
 *   DLSHIM_LOG          error | warn | info | debug          (default warn)
 *   DLSHIM_IDLE_EXIT    0..86400 seconds; 0 means the coordinator exits as
 *                       soon as it has no client             (default 30)
 *   DLSHIM_EXTENT_READS auto | off: chunk loads may read the block device
 *                       directly (engine/daemon/extent_read.c) (default auto)
 *   DLSHIM_JOB          1..127 chars of [A-Za-z0-9._:@+-], not "." or ".."
 *   DLSHIM_FILELIST, DLSHIM_DAEMON, DLSHIM_RUNTIME_DIR
 *                       absolute paths shorter than DLSHIM_PATH_MAX
 *   DLSHIM_STATS        a path; a relative one is resolved against the
 *                       current directory (getcwd) and normalised
 *   DLSHIM_PEERS, DLSHIM_NODE
 *                       stored as given (length-checked), empty = none
 * Except where noted above, an empty value is invalid. The default runtime
 * directory is $XDG_RUNTIME_DIR/dlshim when XDG_RUNTIME_DIR is an absolute
 * path naming a directory, else /tmp/dlshim-<uid>.
 */
#include "dlshim/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SHOW_MAX 64                       /* bytes of a bad value echoed in messages */
#define DEFAULT_RAM_FALLBACK (4ull << 30) /* when sysconf cannot tell the RAM size */
#define DEFAULT_MAX_ITEM (64ull << 20)
#define DEFAULT_IDLE_EXIT 30u
#define CHUNK_MAX 1048576u
#define IDLE_EXIT_MAX 86400u

static const char *const redirect_names[] = {"off", "dir", "any"};
static const char *const sampler_names[] = {"chunk", "dsa"};
static const char *const extent_names[] = {"off", "auto"};
static const char *const evict_names[] = {"refcnt", "lru", "fifo", "random"};
static const char *const log_names[] = {"error", "warn", "info", "debug"};
static const char *const span_names[] = {"off", "on", "auto"};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const char *dlshim_redirect_name(enum dlshim_redirect r)
{
	return (unsigned)r < NELEM(redirect_names) ? redirect_names[r] : "?";
}

const char *dlshim_sampler_name(enum dlshim_sampler s)
{
	return (unsigned)s < NELEM(sampler_names) ? sampler_names[s] : "?";
}

const char *dlshim_evict_name(enum dlshim_evict e)
{
	return (unsigned)e < NELEM(evict_names) ? evict_names[e] : "?";
}

/* ---- error messages ---------------------------------------------------- */

/* Fill `err` with "VAR='value' is not valid: <detail>" and return -1. The
 * value is truncated to SHOW_MAX bytes and non-printable bytes become '?',
 * so the message is always one printable line. */
static int bad_value(char *err, size_t errlen, const char *var, const char *val, const char *detail)
{
	char shown[SHOW_MAX + 4];
	size_t i;

	if (!err || errlen == 0)
		return -1;
	if (!val)
		val = "";
	for (i = 0; i < SHOW_MAX && val[i]; i++) {
		unsigned char c = (unsigned char)val[i];
		shown[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	if (val[i]) {
		memcpy(shown + i, "...", 3);
		i += 3;
	}
	shown[i] = '\0';
	snprintf(err, errlen, "%s='%s' is not valid: %s", var, shown, detail);
	return -1;
}

/* ---- small strict parsers ---------------------------------------------- */

/* Unsigned decimal (or 0x-hex when allow_hex) spanning the whole string. No
 * sign, no spaces, no empty string; overflow rejected. */
static int parse_u64(const char *s, int allow_hex, uint64_t *out)
{
	uint64_t v = 0;
	unsigned base = 10;

	if (!s || !*s)
		return -1;
	if (allow_hex && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
		if (!*s)
			return -1;
	}
	for (; *s; s++) {
		unsigned d;
		char c = *s;

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (base == 16 && c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			return -1;
		if (__builtin_mul_overflow(v, (uint64_t)base, &v) ||
		    __builtin_add_overflow(v, (uint64_t)d, &v))
			return -1;
	}
	*out = v;
	return 0;
}

/* Match `val` against `names` (case-insensitive); index in *idx. */
static int parse_keyword(const char *val, const char *const *names, size_t n, int *idx)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (strcasecmp(val, names[i]) == 0) {
			*idx = (int)i;
			return 0;
		}
	}
	return -1;
}

/* Sizes: "<digits>[.<1..6 digits>][K|M|G|T][B|iB]" (powers of 1024, suffix
 * letters case-insensitive; a fraction needs a K/M/G/T multiplier and the
 * result is rounded down to whole bytes) or "<1..100>%" of ram_bytes. */
int dlshim_parse_size(const char *s, uint64_t ram_bytes, uint64_t *out)
{
	uint64_t whole = 0, frac = 0, pow10 = 1, total, part;
	unsigned shift = 0;
	int ndig = 0, nfrac = 0, has_frac = 0;

	if (!s || !out)
		return -1;
	for (; *s >= '0' && *s <= '9'; s++, ndig++) {
		if (__builtin_mul_overflow(whole, (uint64_t)10, &whole) ||
		    __builtin_add_overflow(whole, (uint64_t)(*s - '0'), &whole))
			return -1;
	}
	if (ndig == 0)
		return -1; /* empty, sign, '.5', garbage */

	if (*s == '%') {
		if (s[1] != '\0' || whole < 1 || whole > 100 || ram_bytes == 0)
			return -1;
		/* ram * whole / 100 without overflowing 64 bits */
		total = (ram_bytes / 100) * whole + (ram_bytes % 100) * whole / 100;
		if (total == 0)
			return -1;
		*out = total;
		return 0;
	}

	if (*s == '.') {
		has_frac = 1;
		for (s++; *s >= '0' && *s <= '9'; s++) {
			if (++nfrac > 6)
				return -1;
			frac = frac * 10 + (uint64_t)(*s - '0');
			pow10 *= 10;
		}
		if (nfrac == 0)
			return -1; /* "1.G" */
	}

	switch (*s) {
	case 'k': case 'K': shift = 10; s++; break;
	case 'm': case 'M': shift = 20; s++; break;
	case 'g': case 'G': shift = 30; s++; break;
	case 't': case 'T': shift = 40; s++; break;
	default: break;
	}
	if (shift && (s[0] == 'i' || s[0] == 'I') && (s[1] == 'b' || s[1] == 'B'))
		s += 2;
	else if (s[0] == 'b' || s[0] == 'B')
		s++;
	if (*s != '\0')
		return -1;
	if (has_frac && shift == 0)
		return -1; /* fractional bytes */

	if (__builtin_mul_overflow(whole, (uint64_t)1 << shift, &total))
		return -1;
	/* frac < 10^6 and the multiplier <= 2^40: the product fits in 64 bits */
	part = (frac << shift) / pow10;
	if (__builtin_add_overflow(total, part, &total))
		return -1;
	if (total == 0)
		return -1;
	*out = total;
	return 0;
}

/* ---- paths ------------------------------------------------------------- */

/* Append the components of `p` to the normalised absolute path out[0..*len).
 * Returns 0, or -1 when it does not fit in outlen (NUL included). */
static int append_components(const char *p, char *out, size_t outlen, size_t *len)
{
	while (*p) {
		const char *c;
		size_t n;

		while (*p == '/')
			p++;
		if (!*p)
			break;
		c = p;
		while (*p && *p != '/')
			p++;
		n = (size_t)(p - c);
		if (n == 1 && c[0] == '.')
			continue;
		if (n == 2 && c[0] == '.' && c[1] == '.') {
			/* drop the last component; ".." at the root stays there */
			while (*len > 1 && out[*len - 1] != '/')
				(*len)--;
			if (*len > 1)
				(*len)--;
			continue;
		}
		/* "/" separator unless out is just "/", then the component */
		if (*len > 1) {
			if (*len + 1 >= outlen)
				return -1;
			out[(*len)++] = '/';
		}
		if (*len + n >= outlen)
			return -1;
		memcpy(out + *len, c, n);
		*len += n;
	}
	return 0;
}

/* Lexical normalisation: no symlink resolution, no system calls. A relative
 * `in` needs an absolute `cwd`; an empty `in` is rejected (it names no file).
 * The result starts with '/', has no "//", "." or ".." components and no
 * trailing '/' (except the root itself). Returns its length, or -1 (bad
 * arguments, or the result or an intermediate form does not fit in outlen). */
long dlshim_path_normalize(const char *cwd, const char *in, char *out, size_t outlen)
{
	size_t len = 1;

	if (!in || !*in || !out || outlen < 2)
		return -1;
	out[0] = '/';
	if (in[0] != '/') {
		if (!cwd || cwd[0] != '/')
			return -1;
		if (append_components(cwd, out, outlen, &len) < 0)
			return -1;
	}
	if (append_components(in, out, outlen, &len) < 0)
		return -1;
	out[len] = '\0';
	return (long)len;
}

int dlshim_config_path_routed(const struct dlshim_config *cfg, const char *path, size_t len)
{
	int i;

	for (i = 0; i < cfg->nroots; i++) {
		size_t rl = cfg->root_len[i];

		if (len < rl || memcmp(path, cfg->roots[i], rl) != 0)
			continue;
		/* equal, or the root is a whole-component prefix; root "/" (rl 1)
		 * ends in '/' itself and so matches every absolute path */
		if (len == rl || path[rl] == '/' || cfg->roots[i][rl - 1] == '/')
			return 1;
	}
	return 0;
}

/* ---- the individual variables ------------------------------------------ */

static int parse_roots(struct dlshim_config *cfg, const char *val, char *err, size_t errlen)
{
	static const char expect[] = "; expected a comma-separated list of at most 16 absolute paths";
	char entry[DLSHIM_PATH_MAX];
	char detail[SHOW_MAX + 160];
	const char *p = val;

	_Static_assert(DLSHIM_MAX_ROOTS == 16, "update the message above");
	while (*p) {
		const char *start = p;
		size_t n;
		long l;
		int i, dup = 0;

		while (*p && *p != ',')
			p++;
		n = (size_t)(p - start);
		if (*p == ',')
			p++;
		if (n == 0)
			continue;
		if (n >= sizeof entry) {
			snprintf(detail, sizeof detail, "an entry is %zu bytes long%s", n, expect);
			return bad_value(err, errlen, "DLSHIM_ROOTS", val, detail);
		}
		memcpy(entry, start, n);
		entry[n] = '\0';
		if (entry[0] != '/') {
			char shown[SHOW_MAX + 1];
			size_t k;

			for (k = 0; k < SHOW_MAX && entry[k]; k++)
				shown[k] = (entry[k] >= 0x20 && entry[k] < 0x7f) ? entry[k] : '?';
			shown[k] = '\0';
			snprintf(detail, sizeof detail, "root '%s%s' is not an absolute path%s", shown,
				 entry[k] ? "..." : "", expect);
			return bad_value(err, errlen, "DLSHIM_ROOTS", val, detail);
		}
		if (cfg->nroots >= DLSHIM_MAX_ROOTS) {
			snprintf(detail, sizeof detail, "too many roots%s", expect);
			return bad_value(err, errlen, "DLSHIM_ROOTS", val, detail);
		}
		l = dlshim_path_normalize(NULL, entry, cfg->roots[cfg->nroots], DLSHIM_PATH_MAX);
		if (l < 0) {
			snprintf(detail, sizeof detail, "a root is too long%s", expect);
			return bad_value(err, errlen, "DLSHIM_ROOTS", val, detail);
		}
		for (i = 0; i < cfg->nroots; i++)
			if (cfg->root_len[i] == (size_t)l &&
			    memcmp(cfg->roots[i], cfg->roots[cfg->nroots], (size_t)l) == 0)
				dup = 1;
		if (dup)
			continue;
		cfg->root_len[cfg->nroots++] = (size_t)l;
	}
	return 0;
}

/* Copy an absolute path shorter than DLSHIM_PATH_MAX into dst. */
static int parse_abs_path(const char *var, const char *val, char *dst, char *err, size_t errlen)
{
	size_t n = strlen(val);

	if (n == 0 || val[0] != '/' || n >= DLSHIM_PATH_MAX)
		return bad_value(err, errlen, var, val,
				 "expected an absolute path shorter than 4096 bytes");
	memcpy(dst, val, n + 1);
	return 0;
}

static int parse_stats_path(struct dlshim_config *cfg, const char *val, char *err, size_t errlen)
{
	char cwd[DLSHIM_PATH_MAX];

	if (val[0] == '/' || val[0] == '\0')
		return parse_abs_path("DLSHIM_STATS", val, cfg->stats_path, err, errlen);
	if (!getcwd(cwd, sizeof cwd))
		return bad_value(err, errlen, "DLSHIM_STATS", val,
				 "the current directory is unknown; expected an absolute path");
	if (dlshim_path_normalize(cwd, val, cfg->stats_path, sizeof cfg->stats_path) < 0) {
		cfg->stats_path[0] = '\0';
		return bad_value(err, errlen, "DLSHIM_STATS", val,
				 "expected a path shorter than 4096 bytes once resolved");
	}
	return 0;
}

static int job_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == ':' || c == '@' || c == '+' || c == '-';
}

static int parse_job(struct dlshim_config *cfg, const char *val, char *err, size_t errlen)
{
	size_t n = strlen(val), i;
	int ok = n >= 1 && n < DLSHIM_JOB_MAX && strcmp(val, ".") != 0 && strcmp(val, "..") != 0;

	for (i = 0; ok && i < n; i++)
		ok = job_char_ok(val[i]);
	if (!ok)
		return bad_value(err, errlen, "DLSHIM_JOB", val,
				 "expected 1 to 127 characters among A-Z a-z 0-9 . _ : @ + - "
				 "(not '.' or '..')");
	memcpy(cfg->job, val, n + 1);
	return 0;
}

/* Stored as given; only the length is checked. */
static int parse_opaque(const char *var, const char *val, char *dst, size_t cap, char *err,
			size_t errlen)
{
	char detail[96];
	size_t n = strlen(val);

	if (n >= cap) {
		snprintf(detail, sizeof detail, "expected at most %zu bytes", cap - 1);
		return bad_value(err, errlen, var, val, detail);
	}
	memcpy(dst, val, n + 1);
	return 0;
}

static int is_directory(const char *path)
{
#ifdef SYS_statx
	struct statx stx;

	/* the raw system call: the shim may interpose stat() and friends */
	if (syscall(SYS_statx, AT_FDCWD, path, 0, STATX_TYPE, &stx) == 0)
		return S_ISDIR(stx.stx_mode);
	if (errno != ENOSYS)
		return 0;
#endif
	{
		struct stat st;

		return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
	}
}

static void default_runtime_dir(struct dlshim_config *cfg, dlshim_getenv_fn get)
{
	static const char sub[] = "/dlshim";
	const char *xdg = get("XDG_RUNTIME_DIR");

	if (xdg && xdg[0] == '/' && strlen(xdg) + sizeof sub <= DLSHIM_PATH_MAX &&
	    is_directory(xdg)) {
		size_t n = strlen(xdg);

		while (n > 1 && xdg[n - 1] == '/')
			n--;
		memcpy(cfg->runtime_dir, xdg, n);
		memcpy(cfg->runtime_dir + (n == 1 ? 0 : n), sub, sizeof sub);
		return;
	}
	snprintf(cfg->runtime_dir, sizeof cfg->runtime_dir, "/tmp/dlshim-%u", (unsigned)getuid());
}

static uint64_t system_ram(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t r;

	if (pages <= 0 || psz <= 0 ||
	    __builtin_mul_overflow((uint64_t)pages, (uint64_t)psz, &r))
		return 0;
	return r;
}

/* torchrun tells each rank the world size and how many ranks its node
 * runs: fewer on this node than in all means ranks on other nodes. */
static int torchrun_spans_nodes(dlshim_getenv_fn get)
{
	const char *w = get("WORLD_SIZE"), *l = get("LOCAL_WORLD_SIZE");
	uint64_t world, local;
	return w && l && parse_u64(w, 0, &world) == 0 && parse_u64(l, 0, &local) == 0 && local > 0 && world > local;
}

static void set_defaults(struct dlshim_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->redirect = DLSHIM_REDIRECT_OFF;
	cfg->sampler = DLSHIM_SAMPLER_CHUNK;
	cfg->evict = DLSHIM_EVICT_REFCNT;
	cfg->log_level = DLSHIM_LOG_WARN;
	cfg->max_item_bytes = DEFAULT_MAX_ITEM;
	cfg->idle_exit_s = DEFAULT_IDLE_EXIT;
	cfg->extent_reads = 1;
}

static const char size_expect[] =
	"expected a size such as 512M, 8G or 50% (a positive integer with an optional K, M, G "
	"or T suffix, or 1% to 100% of RAM)";

static int parse_all(struct dlshim_config *cfg, dlshim_getenv_fn get, uint64_t ram, char *err,
		     size_t errlen)
{
	const char *v;
	uint64_t u;
	int k;

	if ((v = get("DLSHIM_DISABLE"))) {
		if (v[0] == '\0' || strcmp(v, "0") == 0)
			cfg->disabled = 0;
		else if (strcmp(v, "1") == 0)
			cfg->disabled = 1;
		else
			return bad_value(err, errlen, "DLSHIM_DISABLE", v, "expected 0 or 1");
	}

	if ((v = get("DLSHIM_ROOTS")) && parse_roots(cfg, v, err, errlen) < 0)
		return -1;

	if ((v = get("DLSHIM_REDIRECT"))) {
		if (parse_keyword(v, redirect_names, NELEM(redirect_names), &k) < 0)
			return bad_value(err, errlen, "DLSHIM_REDIRECT", v,
					 "expected off, dir or any");
		cfg->redirect = (enum dlshim_redirect)k;
	}
	if ((v = get("DLSHIM_SAMPLER"))) {
		if (parse_keyword(v, sampler_names, NELEM(sampler_names), &k) < 0)
			return bad_value(err, errlen, "DLSHIM_SAMPLER", v, "expected chunk or dsa");
		cfg->sampler = (enum dlshim_sampler)k;
	}
	if ((v = get("DLSHIM_EXTENT_READS"))) {
		if (parse_keyword(v, extent_names, NELEM(extent_names), &k) < 0)
			return bad_value(err, errlen, "DLSHIM_EXTENT_READS", v, "expected auto or off");
		cfg->extent_reads = (int)k;
	}
	if ((v = get("DLSHIM_EVICT"))) {
		if (parse_keyword(v, evict_names, NELEM(evict_names), &k) < 0)
			return bad_value(err, errlen, "DLSHIM_EVICT", v,
					 "expected refcnt, lru, fifo or random");
		cfg->evict = (enum dlshim_evict)k;
	}
	if ((v = get("DLSHIM_LOG"))) {
		if (parse_keyword(v, log_names, NELEM(log_names), &k) < 0)
			return bad_value(err, errlen, "DLSHIM_LOG", v,
					 "expected error, warn, info or debug");
		cfg->log_level = (enum dlshim_log)k;
	}

	if ((v = get("DLSHIM_CACHE"))) {
		if (strchr(v, '%') && ram == 0)
			return bad_value(err, errlen, "DLSHIM_CACHE", v,
					 "the RAM size is unknown; expected an absolute size such as 8G");
		if (dlshim_parse_size(v, ram, &cfg->cache_bytes) < 0)
			return bad_value(err, errlen, "DLSHIM_CACHE", v, size_expect);
	} else if (ram) {
		cfg->cache_bytes = ram / 4;
	} else {
		cfg->cache_bytes = DEFAULT_RAM_FALLBACK / 4;
	}
	if ((v = get("DLSHIM_MAX_ITEM"))) {
		if (strchr(v, '%') && ram == 0)
			return bad_value(err, errlen, "DLSHIM_MAX_ITEM", v,
					 "the RAM size is unknown; expected an absolute size such as 64M");
		if (dlshim_parse_size(v, ram, &cfg->max_item_bytes) < 0)
			return bad_value(err, errlen, "DLSHIM_MAX_ITEM", v, size_expect);
	}
	if (cfg->max_item_bytes > cfg->cache_bytes / 4)
		cfg->max_item_bytes = cfg->cache_bytes / 4;

	if ((v = get("DLSHIM_CHUNK"))) {
		if (strcasecmp(v, "auto") == 0)
			cfg->chunk = 0;
		else if (parse_u64(v, 0, &u) == 0 && u >= 1 && u <= CHUNK_MAX)
			cfg->chunk = (uint32_t)u;
		else
			return bad_value(err, errlen, "DLSHIM_CHUNK", v,
					 "expected auto or an integer from 1 to 1048576");
	}
	if ((v = get("DLSHIM_SEED"))) {
		if (parse_u64(v, 1, &cfg->seed) < 0)
			return bad_value(err, errlen, "DLSHIM_SEED", v,
					 "expected an unsigned 64-bit integer (decimal or 0x-hex)");
		cfg->seed_set = 1;
	}
	if ((v = get("DLSHIM_IDLE_EXIT"))) {
		/* 0 = the coordinator exits as soon as its last client leaves */
		if (parse_u64(v, 0, &u) < 0 || u > IDLE_EXIT_MAX)
			return bad_value(err, errlen, "DLSHIM_IDLE_EXIT", v,
					 "expected an integer number of seconds from 0 to 86400");
		cfg->idle_exit_s = (uint32_t)u;
	}

	if ((v = get("DLSHIM_JOB")) && parse_job(cfg, v, err, errlen) < 0)
		return -1;
	k = 2;
	if ((v = get("DLSHIM_JOB_SPAN")) && parse_keyword(v, span_names, NELEM(span_names), &k) < 0)
		return bad_value(err, errlen, "DLSHIM_JOB_SPAN", v, "expected auto, on or off");
	cfg->job_spans = k == 2 ? torchrun_spans_nodes(get) : k;
	if ((v = get("DLSHIM_FILELIST")) &&
	    parse_abs_path("DLSHIM_FILELIST", v, cfg->filelist, err, errlen) < 0)
		return -1;
	if ((v = get("DLSHIM_DAEMON")) &&
	    parse_abs_path("DLSHIM_DAEMON", v, cfg->daemon_path, err, errlen) < 0)
		return -1;
	if ((v = get("DLSHIM_RUNTIME_DIR"))) {
		if (parse_abs_path("DLSHIM_RUNTIME_DIR", v, cfg->runtime_dir, err, errlen) < 0)
			return -1;
	} else {
		default_runtime_dir(cfg, get);
	}
	if ((v = get("DLSHIM_STATS")) && parse_stats_path(cfg, v, err, errlen) < 0)
		return -1;
	if ((v = get("DLSHIM_PEERS")) &&
	    parse_opaque("DLSHIM_PEERS", v, cfg->peers, sizeof cfg->peers, err, errlen) < 0)
		return -1;
	if ((v = get("DLSHIM_NODE")) &&
	    parse_opaque("DLSHIM_NODE", v, cfg->node, sizeof cfg->node, err, errlen) < 0)
		return -1;
	return 0;
}

static const char *real_getenv(const char *name)
{
	return getenv(name);
}

/* On -1, *cfg is left partly parsed with no roots, so that a caller that
 * uses it anyway routes nothing. */
int dlshim_config_parse(struct dlshim_config *cfg, dlshim_getenv_fn get, uint64_t ram_bytes,
			char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!cfg)
		return -1;
	set_defaults(cfg);
	if (!get)
		get = real_getenv;
	if (ram_bytes == 0)
		ram_bytes = system_ram();
	if (parse_all(cfg, get, ram_bytes, err, errlen) < 0) {
		cfg->nroots = 0;
		return -1;
	}
	return 0;
}
