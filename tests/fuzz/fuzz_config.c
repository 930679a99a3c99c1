/* libFuzzer target for configuration parsing (engine/config.c):
 * dlshim_config_parse() fed by a fake getenv built from the input, plus
 * dlshim_parse_size() and dlshim_path_normalize() on the same values.
 *
 * Input layout:
 *   byte 0..2   which variables are set (bit i = vars[i] below; unset -> NULL)
 *   byte 3      RAM size passed to the parser (see ram_of())
 *   byte 4      errlen selector for the message buffer (small sizes too)
 *   rest        the values, separated by NUL bytes, in the order of vars[]
 *               (missing values are empty strings)
 *
 * Checked:
 *   - success: every field is within its documented range, strings are
 *     NUL-terminated inside their arrays, every root is absolute, normalised
 *     (dlshim_path_normalize is the identity on it), of length root_len[i],
 *     routed by dlshim_config_path_routed, and unique; max_item <= cache/4;
 *   - failure: the message is one printable line that names a DLSHIM_
 *     variable, fits the buffer (ASan: the buffer is exactly errlen bytes),
 *     and the config routes nothing (nroots == 0);
 *   - dlshim_parse_size: a success is > 0, a percentage is at most the RAM,
 *     a plain decimal number equals strtoull's value;
 *   - dlshim_path_normalize into an exactly-sized buffer: the result is
 *     absolute, has no "//", "." or ".." component or trailing slash, its
 *     length is returned, and normalising it again gives itself; a result
 *     that fits in a large buffer fits in a buffer of exactly len + 1 bytes.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlshim/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                               \
	do {                                                                                   \
		if (!(c)) {                                                                    \
			fprintf(stderr, "fuzz_config: %s:%d: check failed: %s\n", __FILE__,      \
				__LINE__, #c);                                                 \
			abort();                                                               \
		}                                                                              \
	} while (0)

static const char *const vars[] = {
	"DLSHIM_DISABLE",  "DLSHIM_ROOTS",       "DLSHIM_REDIRECT", "DLSHIM_SAMPLER",
	"DLSHIM_EVICT",    "DLSHIM_CACHE",       "DLSHIM_MAX_ITEM", "DLSHIM_CHUNK",
	"DLSHIM_SEED",     "DLSHIM_LOG",         "DLSHIM_IDLE_EXIT", "DLSHIM_JOB",
	"DLSHIM_FILELIST", "DLSHIM_DAEMON",      "DLSHIM_RUNTIME_DIR", "DLSHIM_STATS",
	"DLSHIM_PEERS",    "DLSHIM_NODE",        "XDG_RUNTIME_DIR",
};
#define NVARS (sizeof(vars) / sizeof(vars[0]))

static const char *values[NVARS];

static const char *fake_getenv(const char *name)
{
	for (size_t i = 0; i < NVARS; i++)
		if (strcmp(name, vars[i]) == 0)
			return values[i];
	return NULL; /* HOME, TMPDIR...: never consulted from the process env */
}

static uint64_t ram_of(uint8_t sel)
{
	switch (sel & 7) {
	case 0: return 1;
	case 1: return 99;
	case 2: return 100;
	case 3: return UINT64_MAX;
	case 4: return (uint64_t)1 << 40;
	default: return ((uint64_t)sel << 24) + 12345;
	}
}

static int printable_line(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			return 0;
	return 1;
}

/* No "//", no "." or ".." component, no trailing slash (except "/"). */
static int is_normal(const char *p, size_t len)
{
	if (len == 0 || p[0] != '/' || strlen(p) != len)
		return 0;
	if (len == 1)
		return 1;
	if (p[len - 1] == '/')
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (p[i] != '/')
			continue;
		const char *c = p + i + 1;
		size_t n = strcspn(c, "/");
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
	}
	return 1;
}

static void check_normalize(const char *cwd, const char *in)
{
	static char big[2 * DLSHIM_PATH_MAX + 2];
	long n = dlshim_path_normalize(cwd, in, big, sizeof big);

	if (n < 0)
		return;
	CHECK(is_normal(big, (size_t)n));
	/* idempotent */
	char *again = malloc((size_t)n + 1);
	CHECK(again != NULL);
	CHECK(dlshim_path_normalize(NULL, big, again, (size_t)n + 1) == n);
	CHECK(memcmp(again, big, (size_t)n + 1) == 0);
	free(again);
	/* an exactly-sized output buffer suffices; one byte less does not.
	 * (Intermediate forms may need more room than the result, e.g. "a/../b":
	 * then -1 is allowed, but never an overflow.) */
	char *exact = malloc((size_t)n + 1);
	CHECK(exact != NULL);
	long m = dlshim_path_normalize(cwd, in, exact, (size_t)n + 1);
	CHECK(m == -1 || (m == n && memcmp(exact, big, (size_t)n + 1) == 0));
	CHECK(dlshim_path_normalize(cwd, in, exact, (size_t)n) == -1);
	free(exact);
}

static void check_size(const char *s, uint64_t ram)
{
	uint64_t out = 0;

	if (dlshim_parse_size(s, ram, &out) < 0)
		return;
	CHECK(out > 0);
	size_t len = strlen(s);
	CHECK(len > 0);
	if (s[len - 1] == '%')
		CHECK(out <= ram);
	if (strspn(s, "0123456789") == len) {
		errno = 0;
		unsigned long long v = strtoull(s, NULL, 10);
		CHECK(errno == 0 && v == out);
	}
}

static void check_config_ok(const struct dlshim_config *c, uint64_t ram)
{
	CHECK(c->disabled == 0 || c->disabled == 1);
	CHECK(c->nroots >= 0 && c->nroots <= DLSHIM_MAX_ROOTS);
	for (int i = 0; i < c->nroots; i++) {
		const char *r = c->roots[i];
		CHECK(strnlen(r, DLSHIM_PATH_MAX) < DLSHIM_PATH_MAX);
		CHECK(c->root_len[i] == strlen(r));
		CHECK(is_normal(r, c->root_len[i]));
		CHECK(dlshim_config_path_routed(c, r, c->root_len[i]));
		for (int k = 0; k < i; k++)
			CHECK(strcmp(c->roots[k], r) != 0);
	}
	CHECK((unsigned)c->redirect <= DLSHIM_REDIRECT_ANY);
	CHECK((unsigned)c->sampler <= DLSHIM_SAMPLER_DSA);
	CHECK((unsigned)c->evict <= DLSHIM_EVICT_RANDOM);
	CHECK((unsigned)c->log_level <= DLSHIM_LOG_DEBUG);
	CHECK(strcmp(dlshim_redirect_name(c->redirect), "?") != 0);
	CHECK(strcmp(dlshim_sampler_name(c->sampler), "?") != 0);
	CHECK(strcmp(dlshim_evict_name(c->evict), "?") != 0);
	CHECK(c->cache_bytes > 0 || ram < 4); /* default: a quarter of RAM */
	CHECK(c->max_item_bytes <= c->cache_bytes / 4);
	CHECK(c->chunk <= 1048576);
	CHECK(c->idle_exit_s <= 86400);
	CHECK(strnlen(c->filelist, sizeof c->filelist) < sizeof c->filelist);
	CHECK(strnlen(c->job, sizeof c->job) < sizeof c->job);
	CHECK(strnlen(c->runtime_dir, sizeof c->runtime_dir) < sizeof c->runtime_dir);
	CHECK(c->runtime_dir[0] == '/');
	CHECK(strnlen(c->stats_path, sizeof c->stats_path) < sizeof c->stats_path);
	CHECK(strnlen(c->daemon_path, sizeof c->daemon_path) < sizeof c->daemon_path);
	CHECK(strnlen(c->peers, sizeof c->peers) < sizeof c->peers);
	CHECK(strnlen(c->node, sizeof c->node) < sizeof c->node);
	if (c->filelist[0])
		CHECK(c->filelist[0] == '/');
	if (c->daemon_path[0])
		CHECK(c->daemon_path[0] == '/');
	if (c->stats_path[0])
		CHECK(c->stats_path[0] == '/');
	for (const char *p = c->job; *p; p++)
		CHECK(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@+-", *p));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct dlshim_config cfg;
	static const size_t errlens[] = {0, 1, 2, 16, 40, 64, 128, 512};

	if (size < 5 || size > 64 * 1024)
		return 0;
	uint32_t mask = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16;
	uint64_t ram = ram_of(data[3]);
	size_t errlen = errlens[data[4] & 7];

	/* NUL-separated values: a private copy with a terminating NUL */
	size_t n = size - 5;
	char *text = malloc(n + 1);
	CHECK(text != NULL);
	memcpy(text, data + 5, n);
	text[n] = '\0';
	const char *p = text, *end = text + n;
	for (size_t i = 0; i < NVARS; i++) {
		const char *v = p <= end ? p : end;
		values[i] = (mask >> i) & 1 ? v : NULL;
		if (p <= end)
			p += strlen(p) + 1;
	}

	char *err = errlen ? malloc(errlen) : NULL;
	if (errlen)
		CHECK(err != NULL);
	int rc = dlshim_config_parse(&cfg, fake_getenv, ram, err, errlen);
	CHECK(rc == 0 || rc == -1);
	if (rc == 0) {
		check_config_ok(&cfg, ram);
		if (errlen)
			CHECK(err[0] == '\0');
	} else {
		CHECK(cfg.nroots == 0);
		if (errlen) {
			CHECK(strnlen(err, errlen) < errlen);
			CHECK(printable_line(err));
			if (errlen >= 64) {
				CHECK(strncmp(err, "DLSHIM_", 7) == 0);
				CHECK(strstr(err, "is not valid") != NULL || strlen(err) == errlen - 1);
			}
		}
	}
	/* NULL getenv result for everything: the defaults parse */
	free(err);

	/* the same values through the lower-level helpers */
	for (size_t i = 0; i < NVARS; i++) {
		const char *v = values[i] ? values[i] : "";
		check_size(v, ram);
		check_size(v, 0);
		check_normalize(values[(i + 1) % NVARS], v);
		check_normalize("/", v);
	}
	/* NULL and degenerate arguments never crash */
	CHECK(dlshim_parse_size(NULL, ram, NULL) == -1);
	CHECK(dlshim_path_normalize(NULL, NULL, NULL, 0) == -1);
	free(text);
	return 0;
}
