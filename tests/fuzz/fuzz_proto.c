/* libFuzzer target for the wire protocol decoder (engine/proto.c).
 *
 * Every input is one received packet. The decoder must never read outside
 * the packet (the input is copied into a heap block of exactly its size, so
 * ASan sees any over-read), and its verdict must be self-consistent:
 *   - success: the header says magic/version/known type, the declared length
 *     is the packet's, fixed-size types have exactly their payload size, a
 *     HELLO's job name is NUL-terminated inside its field, *payload points
 *     just past the header (NULL for an empty payload) and `why` is NULL;
 *     re-encoding the decoded header and payload gives the same bytes, and
 *     the packet minus its last byte (or plus one byte) is refused;
 *   - failure: `why` names a reason, *payload is NULL, and *hdr was filled
 *     whenever a whole header arrived.
 * The verdict does not depend on the buffer's alignment or on which of the
 * optional out-parameters are passed.
 *
 * Built by `make fuzz` with clang -fsanitize=fuzzer,address,undefined, and
 * by gcc with ASan/UBSan together with tests/fuzz/replay.c, which runs the
 * seed corpus tests/fuzz/corpus/proto/ without libFuzzer.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlshim/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HDR_LEN sizeof(struct dlshim_msg_hdr)

#define CHECK(c)                                                                              \
	do {                                                                                  \
		if (!(c)) {                                                                   \
			fprintf(stderr, "fuzz_proto: %s:%d: check failed: %s\n", __FILE__,      \
				__LINE__, #c);                                                \
			abort();                                                              \
		}                                                                             \
	} while (0)

/* The fixed payload size of a type, or -1 for a variable one. */
static long fixed_len(unsigned type)
{
	switch (type) {
	case DLSHIM_MSG_HELLO: return (long)sizeof(struct dlshim_msg_hello);
	case DLSHIM_MSG_HELLO_OK: return (long)sizeof(struct dlshim_msg_hello_ok);
	case DLSHIM_MSG_OPEN: return (long)sizeof(struct dlshim_msg_open);
	case DLSHIM_MSG_OPEN_R: return (long)sizeof(struct dlshim_msg_open_r);
	case DLSHIM_MSG_RELEASE: return (long)sizeof(struct dlshim_msg_release);
	case DLSHIM_MSG_ROWS_R: return (long)sizeof(struct dlshim_msg_rows_r);
	case DLSHIM_MSG_LOADFD:
	case DLSHIM_MSG_STATS:
	case DLSHIM_MSG_STOP: return 0;
	default: return -1; /* TEXT, ERROR, DATASET, ROWS */
	}
}

/* A ROWS payload: the fixed part, then exactly two non-empty
 * NUL-terminated names (file path, dataset). */
static int rows_names_ok(const uint8_t *p, uint32_t len)
{
	size_t fixed = sizeof(struct dlshim_msg_rows);
	if (len < fixed + 4)
		return 0;
	const uint8_t *a = p + fixed, *end = p + len;
	const uint8_t *z = memchr(a, 0, (size_t)(end - a));
	if (z == NULL || z == a)
		return 0;
	const uint8_t *b = z + 1;
	const uint8_t *z2 = b < end ? memchr(b, 0, (size_t)(end - b)) : NULL;
	return z2 != NULL && z2 != b && z2 == end - 1;
}

/* Consume the payload the way a receiver does: memcpy into the typed struct
 * and read every field (so UBSan/ASan see the accesses a handler makes). */
static uint64_t touch_payload(unsigned type, const void *p, uint32_t len)
{
	uint64_t acc = 0;
	const unsigned char *b = p;

	switch (type) {
	case DLSHIM_MSG_HELLO: {
		struct dlshim_msg_hello h;
		memcpy(&h, p, sizeof h);
		acc = h.pid + h.kind + h.session + h.job_owner + strlen(h.job);
		break;
	}
	case DLSHIM_MSG_OPEN: {
		struct dlshim_msg_open o;
		memcpy(&o, p, sizeof o);
		acc = o.dev ^ o.ino ^ o.size ^ (uint64_t)o.mtime_ns;
		break;
	}
	case DLSHIM_MSG_RELEASE: {
		struct dlshim_msg_release r;
		memcpy(&r, p, sizeof r);
		acc = r.slot + r.gen + r.bytes_cache + r.bytes_pass + r.flags;
		break;
	}
	default:
		for (uint32_t i = 0; i < len; i++)
			acc = acc * 31 + b[i];
		break;
	}
	return acc;
}

static volatile uint64_t sink;

static int decode_at(const uint8_t *data, size_t size, size_t shift, struct dlshim_msg_hdr *h,
		     const void **payload, const char **why, uint8_t **block)
{
	/* exactly `size` bytes after `shift` bytes of slack: any over-read trips ASan */
	uint8_t *b = malloc(size + shift + 1);
	CHECK(b != NULL);
	if (size)
		memcpy(b + shift, data, size);
	*block = b;
	return dlshim_msg_decode(b + shift, size, h, payload, why);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dlshim_msg_hdr h, h2;
	const void *payload = (const void *)1, *payload2 = (const void *)1;
	const char *why = "unset", *why2 = "unset";
	uint8_t *b1, *b2;

	if (size > HDR_LEN + DLSHIM_MSG_MAX + 8)
		return 0;
	memset(&h, 0xa5, sizeof h);
	int rc = decode_at(data, size, 0, &h, &payload, &why, &b1);
	/* the same packet at an odd address */
	memset(&h2, 0x5a, sizeof h2);
	int rc2 = decode_at(data, size, 3, &h2, &payload2, &why2, &b2);
	CHECK(rc == 0 || rc == -1);
	CHECK(rc == rc2);
	/* all optional outputs absent: same verdict, no crash */
	CHECK(dlshim_msg_decode(b1, size, NULL, NULL, NULL) == rc);

	if (rc != 0) {
		CHECK(payload == NULL && payload2 == NULL);
		CHECK(why != NULL && why[0] != '\0');
		CHECK(why2 != NULL && strcmp(why, why2) == 0);
		if (size >= HDR_LEN) {
			struct dlshim_msg_hdr raw;
			memcpy(&raw, data, HDR_LEN);
			CHECK(memcmp(&raw, &h, HDR_LEN) == 0);
			CHECK(memcmp(&raw, &h2, HDR_LEN) == 0);
			/* a valid-looking header must have been refused for a reason */
			long want = raw.type > 0 && raw.type < DLSHIM_MSG_TYPE_MAX ? fixed_len(raw.type) : -2;
			int looks_ok = raw.magic == DLSHIM_PROTO_MAGIC && raw.version == DLSHIM_PROTO_VERSION &&
				       want != -2 && raw.len <= DLSHIM_MSG_MAX && raw.len == size - HDR_LEN &&
				       (want < 0 || (long)raw.len == want);
			if (looks_ok)
				CHECK((raw.type == DLSHIM_MSG_HELLO &&
				       memchr(data + HDR_LEN + offsetof(struct dlshim_msg_hello, job), 0,
					      sizeof(((struct dlshim_msg_hello *)0)->job)) == NULL) ||
				      (raw.type == DLSHIM_MSG_ROWS && !rows_names_ok(data + HDR_LEN, raw.len)));
		}
		free(b1);
		free(b2);
		return 0;
	}

	/* accepted: everything the header promises holds */
	CHECK(why == NULL && why2 == NULL);
	CHECK(size >= HDR_LEN);
	CHECK(h.magic == DLSHIM_PROTO_MAGIC);
	CHECK(h.version == DLSHIM_PROTO_VERSION);
	CHECK(h.type > 0 && h.type < DLSHIM_MSG_TYPE_MAX);
	CHECK(h.len <= DLSHIM_MSG_MAX);
	CHECK((size_t)h.len == size - HDR_LEN);
	CHECK(memcmp(&h, &h2, sizeof h) == 0);
	long want = fixed_len(h.type);
	if (want >= 0)
		CHECK((long)h.len == want);
	if (h.len == 0) {
		CHECK(payload == NULL);
	} else {
		CHECK(payload == (const void *)(b1 + HDR_LEN));
		CHECK(payload2 == (const void *)(b2 + 3 + HDR_LEN));
		sink = touch_payload(h.type, payload, h.len) + touch_payload(h.type, payload2, h.len);
	}
	if (h.type == DLSHIM_MSG_ROWS)
		CHECK(rows_names_ok(payload, h.len));
	if (h.type == DLSHIM_MSG_HELLO)
		CHECK(memchr((const char *)payload + offsetof(struct dlshim_msg_hello, job), 0,
			     sizeof(((struct dlshim_msg_hello *)0)->job)) != NULL);

	/* re-encoding gives the very same packet */
	uint8_t *enc = malloc(size + 1);
	CHECK(enc != NULL);
	size_t n = dlshim_msg_encode(enc, h.type, h.seq, payload, h.len);
	CHECK(n == size);
	CHECK(memcmp(enc, data, size) == 0);
	free(enc);

	/* one byte less or one more no longer matches the declared length */
	CHECK(dlshim_msg_decode(b1, size - 1, NULL, NULL, NULL) == -1);
	uint8_t *longer = malloc(size + 1);
	CHECK(longer != NULL);
	memcpy(longer, data, size);
	longer[size] = 0;
	CHECK(dlshim_msg_decode(longer, size + 1, NULL, NULL, NULL) == -1);
	free(longer);
	free(b1);
	free(b2);
	return 0;
}
