/* Unit tests for engine/proto.c (include/dlshim/proto.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlshim/proto.h"

#define HDR sizeof(struct dlshim_msg_hdr)

static unsigned char buf[HDR + DLSHIM_MSG_MAX + 64];

/* Expected fixed payload size per type, or -1 for variable. */
static long fixed_len(unsigned type)
{
	switch (type) {
	case DLSHIM_MSG_HELLO: return sizeof(struct dlshim_msg_hello);
	case DLSHIM_MSG_HELLO_OK: return sizeof(struct dlshim_msg_hello_ok);
	case DLSHIM_MSG_OPEN: return sizeof(struct dlshim_msg_open);
	case DLSHIM_MSG_OPEN_R: return sizeof(struct dlshim_msg_open_r);
	case DLSHIM_MSG_RELEASE: return sizeof(struct dlshim_msg_release);
	case DLSHIM_MSG_LOADFD:
	case DLSHIM_MSG_STATS:
	case DLSHIM_MSG_STOP: return 0;
	default: return -1; /* TEXT, ERROR */
	}
}

/* Write a raw header (any field values) at p. */
static void put_hdr(unsigned char *p, uint32_t magic, uint16_t version, uint16_t type, uint32_t len,
		    uint32_t seq)
{
	struct dlshim_msg_hdr h = {magic, version, type, len, seq};

	memcpy(p, &h, sizeof h);
}

static int decode(const void *p, size_t n, const char **why)
{
	struct dlshim_msg_hdr h;
	const void *pl = (const void *)1;
	int rc = dlshim_msg_decode(p, n, &h, &pl, why);

	if (rc != 0)
		assert_null(pl);
	return rc;
}

/* ---- round trips ---------------------------------------------------------- */

/* Each fixed-size message survives encode/decode with header and payload intact. */
static void test_roundtrip_fixed(void **state)
{
	struct dlshim_msg_hello hello = {.pid = 1234, .kind = DLSHIM_HELLO_CLIENT, .session = 99};
	struct dlshim_msg_hello_ok ok = {.daemon_pid = 5, .segment_id = 0x1122334455667788ull,
					 .shm_len = 1ull << 33};
	struct dlshim_msg_open op = {.dev = 1, .ino = 2, .size = 3, .mtime_ns = -4};
	struct dlshim_msg_open_r opr = {.status = DLSHIM_OPEN_R_HIT, .item = 7, .slot = 8,
					.gen = 9, .size = 10};
	struct dlshim_msg_release rel = {.item = 7, .gen = 9, .bytes_cache = 11, .bytes_pass = 12};
	const struct {
		uint16_t type;
		const void *p;
		uint32_t len;
	} msgs[] = {
		{DLSHIM_MSG_HELLO, &hello, sizeof hello},
		{DLSHIM_MSG_HELLO_OK, &ok, sizeof ok},
		{DLSHIM_MSG_OPEN, &op, sizeof op},
		{DLSHIM_MSG_OPEN_R, &opr, sizeof opr},
		{DLSHIM_MSG_RELEASE, &rel, sizeof rel},
		{DLSHIM_MSG_LOADFD, NULL, 0},
		{DLSHIM_MSG_STATS, NULL, 0},
		{DLSHIM_MSG_STOP, NULL, 0},
	};
	size_t i, off;

	(void)state;
	strcpy(hello.job, "train-job");
	for (off = 0; off < 4; off++) { /* aligned and unaligned buffers */
		for (i = 0; i < sizeof msgs / sizeof msgs[0]; i++) {
			struct dlshim_msg_hdr h;
			const void *pl = NULL;
			const char *why = "unset";
			size_t n = dlshim_msg_encode(buf + off, msgs[i].type, (uint32_t)(100 + i),
						     msgs[i].p, msgs[i].len);

			assert_int_equal(n, HDR + msgs[i].len);
			assert_int_equal(dlshim_msg_decode(buf + off, n, &h, &pl, &why), 0);
			assert_null(why);
			assert_int_equal(h.magic, DLSHIM_PROTO_MAGIC);
			assert_int_equal(h.version, DLSHIM_PROTO_VERSION);
			assert_int_equal(h.type, msgs[i].type);
			assert_int_equal(h.len, msgs[i].len);
			assert_int_equal(h.seq, 100 + i);
			if (msgs[i].len) {
				assert_ptr_equal(pl, buf + off + HDR);
				assert_memory_equal(pl, msgs[i].p, msgs[i].len);
			} else {
				assert_null(pl);
			}
		}
	}
	/* an unaligned HELLO payload copied out reads back the fields */
	{
		struct dlshim_msg_hello got;
		struct dlshim_msg_hdr h;
		const void *pl;
		size_t n = dlshim_msg_encode(buf + 3, DLSHIM_MSG_HELLO, 1, &hello, sizeof hello);

		assert_int_equal(dlshim_msg_decode(buf + 3, n, &h, &pl, NULL), 0);
		memcpy(&got, pl, sizeof got);
		assert_int_equal(got.pid, 1234);
		assert_int_equal(got.session, 99);
		assert_string_equal(got.job, "train-job");
	}
}

/* TEXT and ERROR carry any payload length from 0 to DLSHIM_MSG_MAX. */
static void test_roundtrip_variable(void **state)
{
	static unsigned char text[DLSHIM_MSG_MAX];
	const uint32_t lens[] = {0, 1, 5, 4096, DLSHIM_MSG_MAX - 1, DLSHIM_MSG_MAX};
	const uint16_t types[] = {DLSHIM_MSG_TEXT, DLSHIM_MSG_ERROR};
	size_t i, t;

	(void)state;
	for (i = 0; i < sizeof text; i++)
		text[i] = (unsigned char)(i * 7 + 3);
	for (t = 0; t < 2; t++) {
		for (i = 0; i < sizeof lens / sizeof lens[0]; i++) {
			struct dlshim_msg_hdr h;
			const void *pl;
			size_t n = dlshim_msg_encode(buf + 1, types[t], 5, text, lens[i]);

			assert_int_equal(n, HDR + lens[i]);
			assert_int_equal(dlshim_msg_decode(buf + 1, n, &h, &pl, NULL), 0);
			assert_int_equal(h.type, types[t]);
			assert_int_equal(h.len, lens[i]);
			if (lens[i])
				assert_memory_equal(pl, text, lens[i]);
			else
				assert_null(pl);
		}
	}
}

/* Encode refuses an oversized payload or a NULL payload with a length. */
static void test_encode_rejects(void **state)
{
	static unsigned char big[DLSHIM_MSG_MAX + 1];

	(void)state;
	assert_int_equal(dlshim_msg_encode(buf, DLSHIM_MSG_TEXT, 0, big, DLSHIM_MSG_MAX + 1), 0);
	assert_int_equal(dlshim_msg_encode(buf, DLSHIM_MSG_TEXT, 0, NULL, 4), 0);
	assert_int_equal(dlshim_msg_encode(buf, DLSHIM_MSG_STOP, 0, NULL, 0), HDR);
}

/* ---- rejections ------------------------------------------------------------ */

/* Packets shorter than a header, or a NULL buffer, are rejected. */
static void test_reject_truncated(void **state)
{
	struct dlshim_msg_open op = {0};
	const char *why = NULL;
	size_t n, k;

	(void)state;
	for (k = 0; k < HDR; k++) {
		unsigned char *p = malloc(k ? k : 1);

		assert_non_null(p);
		n = dlshim_msg_encode(buf, DLSHIM_MSG_STOP, 1, NULL, 0);
		assert_int_equal(n, HDR);
		memcpy(p, buf, k);
		why = NULL;
		assert_int_equal(decode(p, k, &why), -1);
		assert_non_null(why);
		free(p);
	}
	assert_int_equal(decode(NULL, 100, &why), -1);
	/* a fixed-size message cut short anywhere in its payload */
	n = dlshim_msg_encode(buf, DLSHIM_MSG_OPEN, 1, &op, sizeof op);
	for (k = HDR; k < n; k++)
		assert_int_equal(decode(buf, k, &why), -1);
	assert_int_equal(decode(buf, n, &why), 0);
}

/* Wrong magic or version is rejected, and the header is still reported for the seq. */
static void test_reject_magic_version(void **state)
{
	struct dlshim_msg_hdr h;
	const void *pl;
	const char *why = NULL;

	(void)state;
	put_hdr(buf, DLSHIM_PROTO_MAGIC ^ 1, DLSHIM_PROTO_VERSION, DLSHIM_MSG_STOP, 0, 77);
	assert_int_equal(dlshim_msg_decode(buf, HDR, &h, &pl, &why), -1);
	assert_non_null(why);
	assert_int_equal(h.seq, 77);
	assert_null(pl);
	put_hdr(buf, 0, DLSHIM_PROTO_VERSION, DLSHIM_MSG_STOP, 0, 0);
	assert_int_equal(decode(buf, HDR, &why), -1);
	put_hdr(buf, __builtin_bswap32(DLSHIM_PROTO_MAGIC), DLSHIM_PROTO_VERSION, DLSHIM_MSG_STOP,
		0, 0);
	assert_int_equal(decode(buf, HDR, &why), -1);
	put_hdr(buf, DLSHIM_PROTO_MAGIC, 0, DLSHIM_MSG_STOP, 0, 0);
	assert_int_equal(decode(buf, HDR, &why), -1);
	put_hdr(buf, DLSHIM_PROTO_MAGIC, DLSHIM_PROTO_VERSION + 1, DLSHIM_MSG_STOP, 0, 0);
	assert_int_equal(decode(buf, HDR, &why), -1);
	put_hdr(buf, DLSHIM_PROTO_MAGIC, 0xffff, DLSHIM_MSG_STOP, 0, 0);
	assert_int_equal(decode(buf, HDR, &why), -1);
	put_hdr(buf, DLSHIM_PROTO_MAGIC, DLSHIM_PROTO_VERSION, DLSHIM_MSG_STOP, 0, 0);
	assert_int_equal(decode(buf, HDR, &why), 0);
}

/* Type 0, DLSHIM_MSG_TYPE_MAX and beyond are rejected. */
static void test_reject_unknown_type(void **state)
{
	const uint16_t bad[] = {0, DLSHIM_MSG_TYPE_MAX, DLSHIM_MSG_TYPE_MAX + 1, 0x7fff, 0xffff};
	const char *why;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		size_t n = dlshim_msg_encode(buf, bad[i], 0, NULL, 0);

		why = NULL;
		assert_int_equal(decode(buf, n, &why), -1);
		assert_non_null(why);
		n = dlshim_msg_encode(buf, bad[i], 0, "abc", 3);
		assert_int_equal(decode(buf, n, &why), -1);
	}
}

/* A declared length that differs from the bytes received, or exceeds the maximum, is rejected. */
static void test_reject_len_mismatch(void **state)
{
	const char *why;
	size_t n;

	(void)state;
	n = dlshim_msg_encode(buf, DLSHIM_MSG_TEXT, 0, "hello", 5);
	assert_int_equal(decode(buf, n - 1, &why), -1); /* fewer bytes than declared */
	assert_int_equal(decode(buf, n + 1, &why), -1); /* trailing garbage */
	put_hdr(buf, DLSHIM_PROTO_MAGIC, DLSHIM_PROTO_VERSION, DLSHIM_MSG_TEXT, UINT32_MAX, 0);
	assert_int_equal(decode(buf, HDR + 5, &why), -1);
	put_hdr(buf, DLSHIM_PROTO_MAGIC, DLSHIM_PROTO_VERSION, DLSHIM_MSG_TEXT,
		(uint32_t)(UINT32_MAX - HDR + 1), 0); /* would wrap if added to HDR in 32 bits */
	assert_int_equal(decode(buf, HDR + 5, &why), -1);
	/* declared and received agree but exceed DLSHIM_MSG_MAX */
	put_hdr(buf, DLSHIM_PROTO_MAGIC, DLSHIM_PROTO_VERSION, DLSHIM_MSG_TEXT, DLSHIM_MSG_MAX + 1,
		0);
	why = NULL;
	assert_int_equal(decode(buf, HDR + DLSHIM_MSG_MAX + 1, &why), -1);
	assert_non_null(why);
	/* empty-payload types with a payload */
	n = dlshim_msg_encode(buf, DLSHIM_MSG_LOADFD, 0, "x", 1);
	assert_int_equal(decode(buf, n, &why), -1);
	n = dlshim_msg_encode(buf, DLSHIM_MSG_STATS, 0, "x", 1);
	assert_int_equal(decode(buf, n, &why), -1);
	n = dlshim_msg_encode(buf, DLSHIM_MSG_STOP, 0, "x", 1);
	assert_int_equal(decode(buf, n, &why), -1);
}

/* Every fixed-size type rejects payloads one byte short, one byte long, and empty. */
static void test_reject_payload_size(void **state)
{
	static unsigned char zero[512];
	unsigned t;

	(void)state;
	for (t = 1; t < DLSHIM_MSG_TYPE_MAX; t++) {
		long want = fixed_len(t);
		const char *why;
		size_t n;

		if (want <= 0)
			continue;
		n = dlshim_msg_encode(buf, (uint16_t)t, 0, zero, (uint32_t)want - 1);
		assert_int_equal(decode(buf, n, &why), -1);
		n = dlshim_msg_encode(buf, (uint16_t)t, 0, zero, (uint32_t)want + 1);
		assert_int_equal(decode(buf, n, &why), -1);
		n = dlshim_msg_encode(buf, (uint16_t)t, 0, NULL, 0);
		assert_int_equal(decode(buf, n, &why), -1);
		n = dlshim_msg_encode(buf, (uint16_t)t, 0, zero, (uint32_t)want);
		assert_int_equal(decode(buf, n, &why), 0);
	}
}

/* A HELLO whose job name has no NUL within its 128 bytes is rejected. */
static void test_reject_unterminated_job(void **state)
{
	struct dlshim_msg_hello hello;
	const char *why = NULL;
	size_t n;

	(void)state;
	memset(&hello, 0, sizeof hello);
	memset(hello.job, 'j', sizeof hello.job);
	n = dlshim_msg_encode(buf, DLSHIM_MSG_HELLO, 0, &hello, sizeof hello);
	assert_int_equal(decode(buf, n, &why), -1);
	assert_non_null(why);
	hello.job[sizeof hello.job - 1] = '\0'; /* 127 chars + NUL: fine */
	n = dlshim_msg_encode(buf, DLSHIM_MSG_HELLO, 0, &hello, sizeof hello);
	assert_int_equal(decode(buf, n, &why), 0);
	hello.job[0] = '\0'; /* empty job: the decoder accepts it (daemon decides) */
	n = dlshim_msg_encode(buf, DLSHIM_MSG_HELLO, 0, &hello, sizeof hello);
	assert_int_equal(decode(buf, n, &why), 0);
}

/* NULL output pointers are allowed. */
static void test_null_outputs(void **state)
{
	size_t n;

	(void)state;
	n = dlshim_msg_encode(buf, DLSHIM_MSG_TEXT, 0, "a", 1);
	assert_int_equal(dlshim_msg_decode(buf, n, NULL, NULL, NULL), 0);
	assert_int_equal(dlshim_msg_decode(buf, n - 1, NULL, NULL, NULL), -1);
}

/* ---- fuzzing ---------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* xorshift64* */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Random and mutated packets, each in an exactly-sized heap buffer at a random
 * alignment, never make decode crash or read out of bounds, and an accepted
 * packet always satisfies the documented invariants. */
static void test_fuzz(void **state)
{
	static unsigned char src[HDR + 1024];
	long iter;
	long accepted = 0;

	(void)state;
	rng_state = 0x9e3779b97f4a7c15ull;
	for (iter = 0; iter < 300000; iter++) {
		size_t n, off = rnd() % 8;
		unsigned char *p;
		int mode = (int)(rnd() % 4);

		if (mode == 0) {
			/* pure noise */
			n = rnd() % sizeof src;
			for (size_t i = 0; i < n; i++)
				src[i] = (unsigned char)rnd();
		} else {
			/* a valid packet of a random type, then mutated */
			uint16_t type = (uint16_t)(1 + rnd() % (DLSHIM_MSG_TYPE_MAX - 1));
			long fl = fixed_len(type);
			uint32_t len = fl >= 0 ? (uint32_t)fl : (uint32_t)(rnd() % 1000);
			unsigned char pl[1024];
			int k, nmut;

			for (size_t i = 0; i < len; i++)
				pl[i] = (unsigned char)rnd();
			if (type == DLSHIM_MSG_HELLO && rnd() % 2)
				pl[offsetof(struct dlshim_msg_hello, job) + rnd() % 128] = 0;
			n = dlshim_msg_encode(src, type, (uint32_t)rnd(), pl, len);
			assert_int_equal(n, HDR + len);
			nmut = mode == 1 ? 0 : (int)(rnd() % 4);
			for (k = 0; k < nmut; k++) {
				switch (rnd() % 4) {
				case 0: /* flip a bit */
					if (n)
						src[rnd() % n] ^= (unsigned char)(1u << (rnd() % 8));
					break;
				case 1: /* truncate */
					n = rnd() % (n + 1);
					break;
				case 2: /* extend with noise */
					while (n < sizeof src && rnd() % 2)
						src[n++] = (unsigned char)rnd();
					break;
				default: /* overwrite a header field with a random value */
					if (n >= HDR) {
						uint32_t v = (uint32_t)rnd();
						size_t at = (rnd() % 4) * 4;

						memcpy(src + at, &v, 4);
					}
					break;
				}
			}
		}
		p = malloc(off + n + 1);
		assert_non_null(p);
		memcpy(p + off, src, n);
		{
			struct dlshim_msg_hdr h;
			const void *pl = NULL;
			const char *why = NULL;
			int rc = dlshim_msg_decode(p + off, n, &h, &pl, &why);

			if (rc == 0) {
				long fl = fixed_len(h.type);

				accepted++;
				assert_null(why);
				assert_int_equal(h.magic, DLSHIM_PROTO_MAGIC);
				assert_int_equal(h.version, DLSHIM_PROTO_VERSION);
				assert_true(h.type >= 1 && h.type < DLSHIM_MSG_TYPE_MAX);
				assert_int_equal((size_t)h.len + HDR, n);
				assert_true(h.len <= DLSHIM_MSG_MAX);
				if (fl >= 0)
					assert_int_equal(h.len, (uint32_t)fl);
				if (h.len)
					assert_ptr_equal(pl, p + off + HDR);
				else
					assert_null(pl);
				if (h.type == DLSHIM_MSG_HELLO)
					assert_non_null(memchr((const char *)pl +
							       offsetof(struct dlshim_msg_hello, job),
							       0, 128));
			} else {
				assert_int_equal(rc, -1);
				assert_non_null(why);
				assert_null(pl);
			}
		}
		free(p);
	}
	/* the mutation mix must exercise both outcomes */
	assert_true(accepted > 1000);
	assert_true(accepted < 300000);
}

/* A ROWS request carries exactly two non-empty NUL-terminated names after
 * its fixed part; anything else is refused before a handler sees it. */
static void test_rows_names(void **state)
{
	static unsigned char pl[sizeof(struct dlshim_msg_rows) + 64];
	const size_t F = sizeof(struct dlshim_msg_rows);
	const char *why;
	struct {
		const char *names;
		size_t len;
		int ok;
	} cases[] = {
		{"/d/f.h5\0/x\0", 11, 0},
		{"/d/f.h5\0/x", 10, -1},      /* second name unterminated */
		{"/d/f.h5\0/x\0z", 12, -1},  /* trailing bytes */
		{"/d/f.h5\0\0", 9, -1},       /* empty dataset name */
		{"\0/x\0", 4, -1},            /* empty path */
		{"/d/f.h5\0", 8, -1},          /* one name only */
		{"", 0, -1},                  /* no names */
	};
	(void)state;
	memset(pl, 0, sizeof(pl));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(pl + F, cases[i].names, cases[i].len);
		size_t n = dlshim_msg_encode(buf, DLSHIM_MSG_ROWS, 0, pl, (uint32_t)(F + cases[i].len));
		assert_int_equal(decode(buf, n, &why), cases[i].ok);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_fixed),
		cmocka_unit_test(test_roundtrip_variable),
		cmocka_unit_test(test_encode_rejects),
		cmocka_unit_test(test_reject_truncated),
		cmocka_unit_test(test_reject_magic_version),
		cmocka_unit_test(test_reject_unknown_type),
		cmocka_unit_test(test_reject_len_mismatch),
		cmocka_unit_test(test_reject_payload_size),
		cmocka_unit_test(test_reject_unterminated_job),
		cmocka_unit_test(test_null_outputs),
		cmocka_unit_test(test_fuzz),
		cmocka_unit_test(test_rows_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
