/* Unit tests for engine/config.c (include/dlshim/config.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlshim/config.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)
#define RAM (16 * GiB)

/* ---- a fake environment ------------------------------------------------- */

struct env_ent {
	const char *name;
	const char *val;
};

static struct env_ent env[32];
static int nenv;

static void env_reset(void)
{
	nenv = 0;
}

static void env_set(const char *name, const char *val)
{
	int i;

	for (i = 0; i < nenv; i++) {
		if (strcmp(env[i].name, name) == 0) {
			env[i].val = val;
			return;
		}
	}
	assert_true(nenv < (int)(sizeof env / sizeof env[0]));
	env[nenv].name = name;
	env[nenv].val = val;
	nenv++;
}

static const char *fake_getenv(const char *name)
{
	int i;

	for (i = 0; i < nenv; i++)
		if (strcmp(env[i].name, name) == 0)
			return env[i].val;
	return NULL;
}

static struct dlshim_config cfg; /* ~90 KiB: keep it off the stack */
static char err[512];

static int setup(void **state)
{
	(void)state;
	env_reset();
	memset(&cfg, 0xa5, sizeof cfg);
	err[0] = '\0';
	return 0;
}

static int parse(void)
{
	return dlshim_config_parse(&cfg, fake_getenv, RAM, err, sizeof err);
}

/* Parse with one variable set and expect success. */
static void parse_ok1(const char *name, const char *val)
{
	env_reset();
	env_set(name, val);
	if (parse() != 0)
		fail_msg("%s='%s' rejected: %s", name, val, err);
}

/* Parse with one variable set and expect -1 with a message naming it. */
static void parse_bad1(const char *name, const char *val)
{
	char prefix[128];

	env_reset();
	env_set(name, val);
	err[0] = '\0';
	if (parse() != -1)
		fail_msg("%s='%s' accepted", name, val);
	snprintf(prefix, sizeof prefix, "%s='", name);
	if (strncmp(err, prefix, strlen(prefix)) != 0 || !strstr(err, "' is not valid: ") ||
	    !strstr(err, "expected"))
		fail_msg("bad message for %s='%s': %s", name, val, err);
	assert_int_equal(cfg.nroots, 0);
}

/* ---- defaults ----------------------------------------------------------- */

/* With no variable set every field has its documented default. */
static void test_defaults(void **state)
{
	char want[64];

	(void)state;
	assert_int_equal(parse(), 0);
	assert_string_equal(err, "");
	assert_int_equal(cfg.disabled, 0);
	assert_int_equal(cfg.nroots, 0);
	assert_int_equal(cfg.redirect, DLSHIM_REDIRECT_OFF);
	assert_int_equal(cfg.sampler, DLSHIM_SAMPLER_CHUNK);
	assert_int_equal(cfg.evict, DLSHIM_EVICT_REFCNT);
	assert_int_equal(cfg.cache_bytes, RAM / 4);
	assert_int_equal(cfg.chunk, 0);
	assert_string_equal(cfg.filelist, "");
	assert_string_equal(cfg.job, "");
	assert_int_equal(cfg.seed, 0);
	assert_int_equal(cfg.seed_set, 0);
	assert_int_equal(cfg.log_level, DLSHIM_LOG_WARN);
	assert_string_equal(cfg.stats_path, "");
	assert_int_equal(cfg.max_item_bytes, 64 * MiB);
	assert_int_equal(cfg.idle_exit_s, 30);
	assert_string_equal(cfg.daemon_path, "");
	assert_string_equal(cfg.peers, "");
	assert_string_equal(cfg.node, "");
	snprintf(want, sizeof want, "/tmp/dlshim-%u", (unsigned)getuid());
	assert_string_equal(cfg.runtime_dir, want);
}

/* The default runtime dir uses XDG_RUNTIME_DIR only when it is an absolute directory. */
static void test_default_runtime_dir(void **state)
{
	char fallback[64];

	(void)state;
	snprintf(fallback, sizeof fallback, "/tmp/dlshim-%u", (unsigned)getuid());
	env_set("XDG_RUNTIME_DIR", "/tmp");
	assert_int_equal(parse(), 0);
	assert_string_equal(cfg.runtime_dir, "/tmp/dlshim");
	env_set("XDG_RUNTIME_DIR", "/tmp/");
	assert_int_equal(parse(), 0);
	assert_string_equal(cfg.runtime_dir, "/tmp/dlshim");
	env_set("XDG_RUNTIME_DIR", "/nonexistent-dlshim-test-dir");
	assert_int_equal(parse(), 0);
	assert_string_equal(cfg.runtime_dir, fallback);
	env_set("XDG_RUNTIME_DIR", "/dev/null"); /* exists, not a directory */
	assert_int_equal(parse(), 0);
	assert_string_equal(cfg.runtime_dir, fallback);
	env_set("XDG_RUNTIME_DIR", "tmp"); /* relative */
	assert_int_equal(parse(), 0);
	assert_string_equal(cfg.runtime_dir, fallback);
	env_set("XDG_RUNTIME_DIR", "");
	assert_int_equal(parse(), 0);
	assert_string_equal(cfg.runtime_dir, fallback);
	/* an explicit DLSHIM_RUNTIME_DIR wins */
	env_set("XDG_RUNTIME_DIR", "/tmp");
	env_set("DLSHIM_RUNTIME_DIR", "/var/run/x");
	assert_int_equal(parse(), 0);
	assert_string_equal(cfg.runtime_dir, "/var/run/x");
}

/* ram_bytes == 0 queries the system, so the default cache is a positive quarter of RAM. */
static void test_system_ram(void **state)
{
	(void)state;
	assert_int_equal(dlshim_config_parse(&cfg, fake_getenv, 0, err, sizeof err), 0);
	assert_true(cfg.cache_bytes > 0);
	assert_true(cfg.max_item_bytes <= cfg.cache_bytes / 4);
}

/* A NULL look-up function falls back to the real environment. */
static void test_real_getenv(void **state)
{
	(void)state;
	setenv("DLSHIM_REDIRECT", "any", 1);
	assert_int_equal(dlshim_config_parse(&cfg, NULL, RAM, err, sizeof err), 0);
	assert_int_equal(cfg.redirect, DLSHIM_REDIRECT_ANY);
	setenv("DLSHIM_REDIRECT", "nope", 1);
	assert_int_equal(dlshim_config_parse(&cfg, NULL, RAM, err, sizeof err), -1);
	unsetenv("DLSHIM_REDIRECT");
}

/* ---- valid values --------------------------------------------------------- */

/* DLSHIM_DISABLE accepts 0, 1 and empty (= 0). */
static void test_disable_valid(void **state)
{
	(void)state;
	parse_ok1("DLSHIM_DISABLE", "1");
	assert_int_equal(cfg.disabled, 1);
	parse_ok1("DLSHIM_DISABLE", "0");
	assert_int_equal(cfg.disabled, 0);
	parse_ok1("DLSHIM_DISABLE", "");
	assert_int_equal(cfg.disabled, 0);
}

/* DLSHIM_JOB_SPAN: on and off as said; auto (the default) from torchrun's
 * variables: ranks on other nodes when the world is larger than this
 * node's share; a bad value names the variable. */
static void test_job_span(void **state)
{
	(void)state;
	env_reset();
	assert_int_equal(parse(), 0);
	assert_int_equal(cfg.job_spans, 0);
	parse_ok1("DLSHIM_JOB_SPAN", "on");
	assert_int_equal(cfg.job_spans, 1);
	parse_ok1("DLSHIM_JOB_SPAN", "off");
	assert_int_equal(cfg.job_spans, 0);
	const char *cases[][3] = {{"8", "4", "1"}, {"4", "4", "0"}, {"8", "0", "0"}, {"x", "4", "0"}, {NULL, "4", "0"},
				  {"8", NULL, "0"}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		env_reset();
		if (cases[i][0])
			env_set("WORLD_SIZE", cases[i][0]);
		if (cases[i][1])
			env_set("LOCAL_WORLD_SIZE", cases[i][1]);
		assert_int_equal(parse(), 0);
		assert_int_equal(cfg.job_spans, cases[i][2][0] - '0');
		env_set("DLSHIM_JOB_SPAN", "off");
		assert_int_equal(parse(), 0);
		assert_int_equal(cfg.job_spans, 0);
		env_set("DLSHIM_JOB_SPAN", "auto");
		assert_int_equal(parse(), 0);
		assert_int_equal(cfg.job_spans, cases[i][2][0] - '0');
	}
	parse_bad1("DLSHIM_JOB_SPAN", "sometimes");
}

/* Every keyword of the enum-valued variables parses, case-insensitively, and names round-trip. */
static void test_keywords_valid(void **state)
{
	(void)state;
	parse_ok1("DLSHIM_REDIRECT", "off");
	assert_int_equal(cfg.redirect, DLSHIM_REDIRECT_OFF);
	parse_ok1("DLSHIM_REDIRECT", "dir");
	assert_int_equal(cfg.redirect, DLSHIM_REDIRECT_DIR);
	parse_ok1("DLSHIM_REDIRECT", "ANY");
	assert_int_equal(cfg.redirect, DLSHIM_REDIRECT_ANY);
	parse_ok1("DLSHIM_SAMPLER", "chunk");
	assert_int_equal(cfg.sampler, DLSHIM_SAMPLER_CHUNK);
	parse_ok1("DLSHIM_SAMPLER", "dsa");
	assert_int_equal(cfg.sampler, DLSHIM_SAMPLER_DSA);
	parse_ok1("DLSHIM_EVICT", "refcnt");
	assert_int_equal(cfg.evict, DLSHIM_EVICT_REFCNT);
	parse_ok1("DLSHIM_EVICT", "lru");
	assert_int_equal(cfg.evict, DLSHIM_EVICT_LRU);
	parse_ok1("DLSHIM_EVICT", "fifo");
	assert_int_equal(cfg.evict, DLSHIM_EVICT_FIFO);
	parse_ok1("DLSHIM_EVICT", "Random");
	assert_int_equal(cfg.evict, DLSHIM_EVICT_RANDOM);
	parse_ok1("DLSHIM_LOG", "error");
	assert_int_equal(cfg.log_level, DLSHIM_LOG_ERROR);
	parse_ok1("DLSHIM_LOG", "warn");
	assert_int_equal(cfg.log_level, DLSHIM_LOG_WARN);
	parse_ok1("DLSHIM_LOG", "info");
	assert_int_equal(cfg.log_level, DLSHIM_LOG_INFO);
	parse_ok1("DLSHIM_LOG", "DEBUG");
	assert_int_equal(cfg.log_level, DLSHIM_LOG_DEBUG);

	assert_string_equal(dlshim_redirect_name(DLSHIM_REDIRECT_OFF), "off");
	assert_string_equal(dlshim_redirect_name(DLSHIM_REDIRECT_DIR), "dir");
	assert_string_equal(dlshim_redirect_name(DLSHIM_REDIRECT_ANY), "any");
	assert_string_equal(dlshim_sampler_name(DLSHIM_SAMPLER_CHUNK), "chunk");
	assert_string_equal(dlshim_sampler_name(DLSHIM_SAMPLER_DSA), "dsa");
	assert_string_equal(dlshim_evict_name(DLSHIM_EVICT_REFCNT), "refcnt");
	assert_string_equal(dlshim_evict_name(DLSHIM_EVICT_LRU), "lru");
	assert_string_equal(dlshim_evict_name(DLSHIM_EVICT_FIFO), "fifo");
	assert_string_equal(dlshim_evict_name(DLSHIM_EVICT_RANDOM), "random");
	assert_string_equal(dlshim_redirect_name((enum dlshim_redirect)99), "?");
	assert_string_equal(dlshim_sampler_name((enum dlshim_sampler)99), "?");
	assert_string_equal(dlshim_evict_name((enum dlshim_evict)99), "?");
}

/* dlshim_parse_size accepts integers, K/M/G/T (+B/iB) suffixes, fractions with a suffix and N%. */
static void test_size_valid(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} ok[] = {
		{"1", 1},
		{"1048576", 1048576},
		{"100B", 100},
		{"512M", 512 * MiB},
		{"512m", 512 * MiB},
		{"512MB", 512 * MiB},
		{"512MiB", 512 * MiB},
		{"512mib", 512 * MiB},
		{"4k", 4096},
		{"4KB", 4096},
		{"8G", 8 * GiB},
		{"2T", 2ull << 40},
		{"2tib", 2ull << 40},
		{"1.5G", GiB + GiB / 2},
		{"0.5K", 512},
		{"1.25M", MiB + MiB / 4},
		{"0.000001T", (1ull << 40) / 1000000},
		{"16777215T", ((1ull << 24) - 1) << 40},
		{"18446744073709551615", UINT64_MAX},
		{"00512M", 512 * MiB},
		{"50%", RAM / 2},
		{"1%", RAM / 100},
		{"100%", RAM},
	};
	size_t i;
	uint64_t v;

	(void)state;
	for (i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		v = 0;
		if (dlshim_parse_size(ok[i].s, RAM, &v) != 0)
			fail_msg("'%s' rejected", ok[i].s);
		if (v != ok[i].v)
			fail_msg("'%s' -> %llu, want %llu", ok[i].s, (unsigned long long)v,
				 (unsigned long long)ok[i].v);
	}
	/* percentages of a huge RAM size do not overflow */
	assert_int_equal(dlshim_parse_size("100%", UINT64_MAX, &v), 0);
	assert_int_equal(v, UINT64_MAX);
	assert_int_equal(dlshim_parse_size("99%", UINT64_MAX, &v), 0);
	assert_true(v < UINT64_MAX && v > UINT64_MAX / 100 * 98);
}

/* DLSHIM_CACHE and DLSHIM_MAX_ITEM take sizes; MAX_ITEM is capped at a quarter of the cache. */
static void test_cache_and_max_item_valid(void **state)
{
	(void)state;
	parse_ok1("DLSHIM_CACHE", "8G");
	assert_int_equal(cfg.cache_bytes, 8 * GiB);
	assert_int_equal(cfg.max_item_bytes, 64 * MiB);
	parse_ok1("DLSHIM_CACHE", "50%");
	assert_int_equal(cfg.cache_bytes, RAM / 2);
	parse_ok1("DLSHIM_CACHE", "100M");
	assert_int_equal(cfg.cache_bytes, 100 * MiB);
	assert_int_equal(cfg.max_item_bytes, 25 * MiB);
	parse_ok1("DLSHIM_MAX_ITEM", "1M");
	assert_int_equal(cfg.max_item_bytes, MiB);
	parse_ok1("DLSHIM_MAX_ITEM", "1T"); /* capped at cache/4 = RAM/16 */
	assert_int_equal(cfg.max_item_bytes, RAM / 16);
	parse_ok1("DLSHIM_MAX_ITEM", "1%");
	assert_int_equal(cfg.max_item_bytes, RAM / 100);
}

/* DLSHIM_CHUNK, DLSHIM_SEED and DLSHIM_IDLE_EXIT accept their full ranges. */
static void test_numbers_valid(void **state)
{
	(void)state;
	parse_ok1("DLSHIM_CHUNK", "auto");
	assert_int_equal(cfg.chunk, 0);
	parse_ok1("DLSHIM_CHUNK", "1");
	assert_int_equal(cfg.chunk, 1);
	parse_ok1("DLSHIM_CHUNK", "1048576");
	assert_int_equal(cfg.chunk, 1048576);
	parse_ok1("DLSHIM_SEED", "0");
	assert_int_equal(cfg.seed, 0);
	assert_int_equal(cfg.seed_set, 1);
	parse_ok1("DLSHIM_SEED", "18446744073709551615");
	assert_int_equal(cfg.seed, UINT64_MAX);
	parse_ok1("DLSHIM_SEED", "0xDEADbeef");
	assert_int_equal(cfg.seed, 0xdeadbeefull);
	parse_ok1("DLSHIM_SEED", "0xffffffffffffffff");
	assert_int_equal(cfg.seed, UINT64_MAX);
	parse_ok1("DLSHIM_SEED", "42");
	assert_int_equal(cfg.seed, 42);
	parse_ok1("DLSHIM_IDLE_EXIT", "0");
	assert_int_equal(cfg.idle_exit_s, 0);
	parse_ok1("DLSHIM_IDLE_EXIT", "86400");
	assert_int_equal(cfg.idle_exit_s, 86400);
	parse_ok1("DLSHIM_IDLE_EXIT", "5");
	assert_int_equal(cfg.idle_exit_s, 5);
}

/* DLSHIM_JOB accepts 1..127 characters of the allowed set. */
static void test_job_valid(void **state)
{
	char name[128];

	(void)state;
	parse_ok1("DLSHIM_JOB", "a");
	assert_string_equal(cfg.job, "a");
	parse_ok1("DLSHIM_JOB", "job-123-ab.cd_EF:gh@node+1");
	assert_string_equal(cfg.job, "job-123-ab.cd_EF:gh@node+1");
	memset(name, 'x', 127);
	name[127] = '\0';
	parse_ok1("DLSHIM_JOB", name);
	assert_string_equal(cfg.job, name);
}

/* Path variables store absolute paths; a relative DLSHIM_STATS resolves against the cwd. */
static void test_paths_valid(void **state)
{
	char cwd[DLSHIM_PATH_MAX], want[DLSHIM_PATH_MAX + 32];

	(void)state;
	parse_ok1("DLSHIM_FILELIST", "/data/list.txt");
	assert_string_equal(cfg.filelist, "/data/list.txt");
	parse_ok1("DLSHIM_DAEMON", "/opt/dlshim/bin/dlshimd");
	assert_string_equal(cfg.daemon_path, "/opt/dlshim/bin/dlshimd");
	parse_ok1("DLSHIM_RUNTIME_DIR", "/run/user/1000/x");
	assert_string_equal(cfg.runtime_dir, "/run/user/1000/x");
	parse_ok1("DLSHIM_STATS", "/tmp/stats.json");
	assert_string_equal(cfg.stats_path, "/tmp/stats.json");

	assert_non_null(getcwd(cwd, sizeof cwd));
	parse_ok1("DLSHIM_STATS", "out/./stats.json");
	snprintf(want, sizeof want, "%s/out/stats.json", strcmp(cwd, "/") ? cwd : "");
	assert_string_equal(cfg.stats_path, want);

	parse_ok1("DLSHIM_PEERS", "");
	assert_string_equal(cfg.peers, "");
	parse_ok1("DLSHIM_PEERS", "node1:7000,node2:7000");
	assert_string_equal(cfg.peers, "node1:7000,node2:7000");
	parse_ok1("DLSHIM_NODE", "node1");
	assert_string_equal(cfg.node, "node1");
}

/* Several variables at once all take effect. */
static void test_combined(void **state)
{
	(void)state;
	env_set("DLSHIM_ROOTS", "/data/a,/data/b/");
	env_set("DLSHIM_REDIRECT", "dir");
	env_set("DLSHIM_CACHE", "2G");
	env_set("DLSHIM_MAX_ITEM", "16M");
	env_set("DLSHIM_SEED", "7");
	env_set("DLSHIM_JOB", "train");
	assert_int_equal(parse(), 0);
	assert_int_equal(cfg.nroots, 2);
	assert_int_equal(cfg.redirect, DLSHIM_REDIRECT_DIR);
	assert_int_equal(cfg.cache_bytes, 2 * GiB);
	assert_int_equal(cfg.max_item_bytes, 16 * MiB);
	assert_int_equal(cfg.seed, 7);
	assert_string_equal(cfg.job, "train");
}

/* ---- invalid values ------------------------------------------------------- */

/* Every variable rejects bad values with -1 and a message that names it. */
static void test_invalid_values(void **state)
{
	static char long_path[DLSHIM_PATH_MAX + 8], long_job[130], long_node[DLSHIM_JOB_MAX + 1];
	static const char *const size_bad[] = {
		"", "-1", "0", "0K", "0%", "150%", "101%", "1e9", "12Q", "abc", "1.5", "1.",
		".5G", "1.5.5G", "1.0000001G", " 1G", "1G ", "+1G", "1GG", "1iB", "1Gi", "1GBB",
		"99999999999999999999G", "18446744073709551616", "16777216T", "17179869184G",
		"50.5%", "%", "50%%", "0x10", "1,000", "0.0000001T", "0.0001K"};
	const char *size_vars[] = {"DLSHIM_CACHE", "DLSHIM_MAX_ITEM"};
	size_t i, j;

	(void)state;
	memset(long_path, 'a', sizeof long_path - 1);
	long_path[0] = '/';
	long_path[sizeof long_path - 1] = '\0';
	memset(long_job, 'j', sizeof long_job - 1);
	long_job[sizeof long_job - 1] = '\0';
	memset(long_node, 'n', sizeof long_node - 1);
	long_node[sizeof long_node - 1] = '\0';

	parse_bad1("DLSHIM_DISABLE", "2");
	parse_bad1("DLSHIM_DISABLE", "-1");
	parse_bad1("DLSHIM_DISABLE", "yes");
	parse_bad1("DLSHIM_DISABLE", " 1");
	parse_bad1("DLSHIM_DISABLE", "01");

	parse_bad1("DLSHIM_ROOTS", "data");
	parse_bad1("DLSHIM_ROOTS", "/ok,relative/path");
	parse_bad1("DLSHIM_ROOTS", "./x");
	parse_bad1("DLSHIM_ROOTS", long_path);

	for (i = 0; i < 4; i++) {
		static const char *const vars[] = {"DLSHIM_REDIRECT", "DLSHIM_SAMPLER",
						   "DLSHIM_EVICT", "DLSHIM_LOG"};
		parse_bad1(vars[i], "");
		parse_bad1(vars[i], "xyz");
		parse_bad1(vars[i], "-1");
		parse_bad1(vars[i], "0");
		parse_bad1(vars[i], "offf");
		parse_bad1(vars[i], " off");
	}
	parse_bad1("DLSHIM_LOG", "warning");
	parse_bad1("DLSHIM_EVICT", "lru ");

	for (j = 0; j < 2; j++) {
		for (i = 0; i < sizeof size_bad / sizeof size_bad[0]; i++) {
			uint64_t v;

			parse_bad1(size_vars[j], size_bad[i]);
			if (dlshim_parse_size(size_bad[i], RAM, &v) != -1)
				fail_msg("dlshim_parse_size('%s') accepted", size_bad[i]);
		}
	}

	parse_bad1("DLSHIM_CHUNK", "");
	parse_bad1("DLSHIM_CHUNK", "0");
	parse_bad1("DLSHIM_CHUNK", "-1");
	parse_bad1("DLSHIM_CHUNK", "1048577");
	parse_bad1("DLSHIM_CHUNK", "99999999999999999999");
	parse_bad1("DLSHIM_CHUNK", "1e3");
	parse_bad1("DLSHIM_CHUNK", "12Q");
	parse_bad1("DLSHIM_CHUNK", "0x10");
	parse_bad1("DLSHIM_CHUNK", "autox");

	parse_bad1("DLSHIM_SEED", "");
	parse_bad1("DLSHIM_SEED", "-1");
	parse_bad1("DLSHIM_SEED", "18446744073709551616");
	parse_bad1("DLSHIM_SEED", "0x10000000000000000");
	parse_bad1("DLSHIM_SEED", "0x");
	parse_bad1("DLSHIM_SEED", "0xg");
	parse_bad1("DLSHIM_SEED", "1e9");
	parse_bad1("DLSHIM_SEED", "12Q");
	parse_bad1("DLSHIM_SEED", " 1");

	parse_bad1("DLSHIM_IDLE_EXIT", "");
	parse_bad1("DLSHIM_IDLE_EXIT", "-1");
	parse_bad1("DLSHIM_IDLE_EXIT", "86401");
	parse_bad1("DLSHIM_IDLE_EXIT", "99999999999999999999");
	parse_bad1("DLSHIM_IDLE_EXIT", "1e9");
	parse_bad1("DLSHIM_IDLE_EXIT", "30s");

	parse_bad1("DLSHIM_JOB", "");
	parse_bad1("DLSHIM_JOB", "has space");
	parse_bad1("DLSHIM_JOB", "a/b");
	parse_bad1("DLSHIM_JOB", "caf\xc3\xa9");
	parse_bad1("DLSHIM_JOB", "tab\t");
	parse_bad1("DLSHIM_JOB", ".");
	parse_bad1("DLSHIM_JOB", "..");
	parse_bad1("DLSHIM_JOB", long_job);

	for (i = 0; i < 3; i++) {
		static const char *const vars[] = {"DLSHIM_FILELIST", "DLSHIM_DAEMON",
						   "DLSHIM_RUNTIME_DIR"};
		parse_bad1(vars[i], "");
		parse_bad1(vars[i], "relative/path");
		parse_bad1(vars[i], long_path);
	}
	parse_bad1("DLSHIM_STATS", "");
	parse_bad1("DLSHIM_STATS", long_path);
	parse_bad1("DLSHIM_STATS", long_path + 1); /* relative and too long once resolved */

	parse_bad1("DLSHIM_PEERS", long_path);
	parse_bad1("DLSHIM_NODE", long_node);
}

/* The message has the documented shape, truncates long values and hides control bytes. */
static void test_error_message_format(void **state)
{
	char longval[200];

	(void)state;
	parse_bad1("DLSHIM_REDIRECT", "xyz");
	assert_string_equal(err, "DLSHIM_REDIRECT='xyz' is not valid: expected off, dir or any");
	parse_bad1("DLSHIM_EVICT", "x");
	assert_string_equal(err, "DLSHIM_EVICT='x' is not valid: expected refcnt, lru, fifo or random");
	parse_bad1("DLSHIM_CACHE", "12Q");
	assert_non_null(strstr(err, "512M"));
	assert_non_null(strstr(err, "%"));

	memset(longval, 'z', sizeof longval - 1);
	longval[sizeof longval - 1] = '\0';
	parse_bad1("DLSHIM_SAMPLER", longval);
	assert_non_null(strstr(err, "DLSHIM_SAMPLER='"));
	assert_non_null(strstr(err, "...' is not valid: expected chunk or dsa"));
	assert_true(strlen(err) < 64 + 80);

	parse_bad1("DLSHIM_LOG", "a\nb\x1b");
	assert_string_equal(err, "DLSHIM_LOG='a?b?' is not valid: expected error, warn, info or debug");

	parse_bad1("DLSHIM_ROOTS", "/ok,rel/dir");
	assert_non_null(strstr(err, "'rel/dir'"));

	/* a tiny or absent buffer is not overrun */
	env_reset();
	env_set("DLSHIM_LOG", "bad");
	assert_int_equal(dlshim_config_parse(&cfg, fake_getenv, RAM, err, 8), -1);
	assert_int_equal(strlen(err), 7);
	assert_int_equal(dlshim_config_parse(&cfg, fake_getenv, RAM, NULL, 0), -1);
}

/* Percentages are rejected when the RAM size is not known to dlshim_parse_size. */
static void test_size_percent_needs_ram(void **state)
{
	uint64_t v;

	(void)state;
	assert_int_equal(dlshim_parse_size("50%", 0, &v), -1);
	assert_int_equal(dlshim_parse_size("1%", 50, &v), -1); /* rounds to zero bytes */
	assert_int_equal(dlshim_parse_size(NULL, RAM, &v), -1);
}

/* ---- roots and routing ---------------------------------------------------- */

/* Roots are normalised, trailing slashes dropped, empty entries and duplicates skipped. */
static void test_roots_normalised(void **state)
{
	(void)state;
	env_set("DLSHIM_ROOTS", ",/data//imagenet/,,/data/x/../coco/.,/data/imagenet,");
	assert_int_equal(parse(), 0);
	assert_int_equal(cfg.nroots, 2);
	assert_string_equal(cfg.roots[0], "/data/imagenet");
	assert_int_equal(cfg.root_len[0], strlen("/data/imagenet"));
	assert_string_equal(cfg.roots[1], "/data/coco");
	assert_int_equal(cfg.root_len[1], strlen("/data/coco"));

	env_set("DLSHIM_ROOTS", "");
	assert_int_equal(parse(), 0);
	assert_int_equal(cfg.nroots, 0);

	env_set("DLSHIM_ROOTS", ",,,");
	assert_int_equal(parse(), 0);
	assert_int_equal(cfg.nroots, 0);

	env_set("DLSHIM_ROOTS", "///");
	assert_int_equal(parse(), 0);
	assert_int_equal(cfg.nroots, 1);
	assert_string_equal(cfg.roots[0], "/");
	assert_int_equal(cfg.root_len[0], 1);
}

/* At most DLSHIM_MAX_ROOTS distinct roots are accepted. */
static void test_roots_limit(void **state)
{
	static char list[DLSHIM_MAX_ROOTS * 8 + 16];
	size_t off = 0;
	int i;

	(void)state;
	for (i = 0; i < DLSHIM_MAX_ROOTS; i++)
		off += (size_t)snprintf(list + off, sizeof list - off, "/r%d,", i);
	env_set("DLSHIM_ROOTS", list);
	assert_int_equal(parse(), 0);
	assert_int_equal(cfg.nroots, DLSHIM_MAX_ROOTS);
	snprintf(list + off, sizeof list - off, "/r%d", i);
	parse_bad1("DLSHIM_ROOTS", list);
	assert_non_null(strstr(err, "too many"));
}

/* A root's full length (PATH_MAX - 1) fits; one more byte does not. */
static void test_roots_length(void **state)
{
	static char p[DLSHIM_PATH_MAX + 1];

	(void)state;
	memset(p, 'a', DLSHIM_PATH_MAX - 1);
	p[0] = '/';
	p[DLSHIM_PATH_MAX - 1] = '\0';
	parse_ok1("DLSHIM_ROOTS", p);
	assert_int_equal(cfg.root_len[0], DLSHIM_PATH_MAX - 1);
	p[DLSHIM_PATH_MAX - 1] = 'a';
	p[DLSHIM_PATH_MAX] = '\0';
	parse_bad1("DLSHIM_ROOTS", p);
}

static int routed(const char *path)
{
	return dlshim_config_path_routed(&cfg, path, strlen(path));
}

/* Only the root itself and paths below it (whole components) are routed. */
static void test_path_routed(void **state)
{
	(void)state;
	env_set("DLSHIM_ROOTS", "/data/a,/srv/file.bin");
	assert_int_equal(parse(), 0);
	assert_true(routed("/data/a"));
	assert_true(routed("/data/a/x"));
	assert_true(routed("/data/a/x/y.jpg"));
	assert_false(routed("/data/ab"));
	assert_false(routed("/data/ab/x"));
	assert_false(routed("/data"));
	assert_false(routed("/data/"));
	assert_false(routed("/"));
	assert_false(routed(""));
	assert_false(routed("data/a/x"));
	assert_true(routed("/srv/file.bin"));
	assert_false(routed("/srv/file.bin2"));
	assert_false(routed("/srv/file.bi"));
	/* len bounds the comparison, not the NUL */
	assert_true(dlshim_config_path_routed(&cfg, "/data/a/xyz", 7));
	assert_false(dlshim_config_path_routed(&cfg, "/data/a/xyz", 6));
}

/* Root "/" routes every absolute path and nothing relative. */
static void test_path_routed_slash(void **state)
{
	(void)state;
	env_set("DLSHIM_ROOTS", "/");
	assert_int_equal(parse(), 0);
	assert_true(routed("/"));
	assert_true(routed("/x"));
	assert_true(routed("/data/ab/c"));
	assert_false(routed("x"));
	assert_false(routed(""));
}

/* No roots: nothing is routed; a failed parse leaves no roots. */
static void test_path_routed_none(void **state)
{
	(void)state;
	assert_int_equal(parse(), 0);
	assert_false(routed("/data/a"));
	env_set("DLSHIM_ROOTS", "/data/a");
	env_set("DLSHIM_LOG", "loud");
	assert_int_equal(parse(), -1);
	assert_int_equal(cfg.nroots, 0);
	assert_false(routed("/data/a"));
}

/* ---- dlshim_path_normalize ---------------------------------------------- */

static void check_norm(const char *cwd, const char *in, const char *want)
{
	char out[DLSHIM_PATH_MAX];
	long n = dlshim_path_normalize(cwd, in, out, sizeof out);

	if (!want) {
		if (n != -1)
			fail_msg("normalize(%s, %s) = '%s', want -1", cwd ? cwd : "NULL", in, out);
		return;
	}
	if (n < 0)
		fail_msg("normalize(%s, %s) failed, want '%s'", cwd ? cwd : "NULL", in, want);
	assert_string_equal(out, want);
	assert_int_equal(n, (long)strlen(want));
}

/* Lexical normalisation handles ".", "..", "//", trailing "/" and relative inputs. */
static void test_normalize(void **state)
{
	(void)state;
	check_norm(NULL, "/", "/");
	check_norm(NULL, "//", "/");
	check_norm(NULL, "/a/b/c", "/a/b/c");
	check_norm(NULL, "/a//b///c/", "/a/b/c");
	check_norm(NULL, "/a/./b/.", "/a/b");
	check_norm(NULL, "/a/b/../c", "/a/c");
	check_norm(NULL, "/a/b/../../..", "/");
	check_norm(NULL, "/../../x", "/x");
	check_norm(NULL, "/a/..", "/");
	check_norm(NULL, "/a/.../b", "/a/.../b");
	check_norm(NULL, "/a/..b/.c/b..", "/a/..b/.c/b..");
	check_norm(NULL, "/.", "/");
	check_norm(NULL, "/./", "/");
	check_norm(NULL, "relative", NULL);
	check_norm(NULL, "", NULL);
	check_norm("/home/u", "", NULL);
	check_norm("/home/u", "x/y", "/home/u/x/y");
	check_norm("/home/u/", "./x", "/home/u/x");
	check_norm("/home/u", "../v/./w/", "/home/v/w");
	check_norm("/home/u", "../../../..", "/");
	check_norm("/home/u", ".", "/home/u");
	check_norm("/home/u", "/abs/p", "/abs/p");
	check_norm("/", "x", "/x");
	check_norm("rel", "x", NULL);
	check_norm("//home//u/..", "x", "/home/x");
}

/* The output buffer bound is respected exactly. */
static void test_normalize_bounds(void **state)
{
	char out[8];

	(void)state;
	memset(out, 'X', sizeof out);
	assert_int_equal(dlshim_path_normalize(NULL, "/abcdef", out, 8), 7);
	assert_string_equal(out, "/abcdef");
	assert_int_equal(dlshim_path_normalize(NULL, "/abcdefg", out, 8), -1);
	assert_int_equal(dlshim_path_normalize(NULL, "/a/b/c/d", out, 8), -1);
	assert_int_equal(dlshim_path_normalize(NULL, "/a/b/c/", out, 7), 6);
	assert_int_equal(dlshim_path_normalize("/abc", "de", out, 8), 7);
	assert_string_equal(out, "/abc/de");
	assert_int_equal(dlshim_path_normalize("/abc", "def", out, 8), -1);
	assert_int_equal(dlshim_path_normalize(NULL, "/", out, 2), 1);
	assert_int_equal(dlshim_path_normalize(NULL, "/", out, 1), -1);
	assert_int_equal(dlshim_path_normalize(NULL, "/", NULL, 8), -1);
	assert_int_equal(dlshim_path_normalize(NULL, NULL, out, 8), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_defaults, setup),
		cmocka_unit_test_setup(test_default_runtime_dir, setup),
		cmocka_unit_test_setup(test_system_ram, setup),
		cmocka_unit_test_setup(test_real_getenv, setup),
		cmocka_unit_test_setup(test_disable_valid, setup),
		cmocka_unit_test_setup(test_job_span, setup),
		cmocka_unit_test_setup(test_keywords_valid, setup),
		cmocka_unit_test_setup(test_size_valid, setup),
		cmocka_unit_test_setup(test_cache_and_max_item_valid, setup),
		cmocka_unit_test_setup(test_numbers_valid, setup),
		cmocka_unit_test_setup(test_job_valid, setup),
		cmocka_unit_test_setup(test_paths_valid, setup),
		cmocka_unit_test_setup(test_combined, setup),
		cmocka_unit_test_setup(test_invalid_values, setup),
		cmocka_unit_test_setup(test_error_message_format, setup),
		cmocka_unit_test_setup(test_size_percent_needs_ram, setup),
		cmocka_unit_test_setup(test_roots_normalised, setup),
		cmocka_unit_test_setup(test_roots_limit, setup),
		cmocka_unit_test_setup(test_roots_length, setup),
		cmocka_unit_test_setup(test_path_routed, setup),
		cmocka_unit_test_setup(test_path_routed_slash, setup),
		cmocka_unit_test_setup(test_path_routed_none, setup),
		cmocka_unit_test_setup(test_normalize, setup),
		cmocka_unit_test_setup(test_normalize_bounds, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
