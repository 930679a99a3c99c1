/* dlshim wire protocol: encoding and validation (see include/dlshim/proto.h).
 *
 * Both functions accept buffers at any alignment: the header is copied in
 * and out with memcpy. dlshim_msg_decode() returns the payload pointer as it
 * lies in the caller's buffer (possibly unaligned): callers memcpy it into a
 * properly typed struct before reading fields. The decoder never reads past
 * `n` bytes of `buf`; it is fuzzed by tests/unit/test_proto.c.
 */
#include "dlshim/proto.h"

#include <stddef.h>
#include <string.h>

#define HDR_LEN sizeof(struct dlshim_msg_hdr)
#define VARIABLE UINT32_MAX /* any payload length up to DLSHIM_MSG_MAX */

/* Expected payload length per type (index = type). */
static const uint32_t payload_len[DLSHIM_MSG_TYPE_MAX] = {
	[DLSHIM_MSG_HELLO] = sizeof(struct dlshim_msg_hello),
	[DLSHIM_MSG_HELLO_OK] = sizeof(struct dlshim_msg_hello_ok),
	[DLSHIM_MSG_OPEN] = sizeof(struct dlshim_msg_open),
	[DLSHIM_MSG_OPEN_R] = sizeof(struct dlshim_msg_open_r),
	[DLSHIM_MSG_LOADFD] = 0,
	[DLSHIM_MSG_RELEASE] = sizeof(struct dlshim_msg_release),
	[DLSHIM_MSG_STATS] = 0,
	[DLSHIM_MSG_TEXT] = VARIABLE,
	[DLSHIM_MSG_STOP] = 0,
	[DLSHIM_MSG_ERROR] = VARIABLE,
	[DLSHIM_MSG_DATASET] = VARIABLE,
	[DLSHIM_MSG_ROWS] = VARIABLE,
	[DLSHIM_MSG_ROWS_R] = sizeof(struct dlshim_msg_rows_r),
	[DLSHIM_MSG_OPEN_PATH] = VARIABLE,
};

/* Returns 0 when `payload` or `len` is inconsistent (NULL with len > 0) or
 * len exceeds DLSHIM_MSG_MAX: such a packet would be refused by the peer.
 * The type is not checked, so tests can encode invalid packets. */
size_t dlshim_msg_encode(void *buf, uint16_t type, uint32_t seq, const void *payload, uint32_t len)
{
	struct dlshim_msg_hdr h;

	if (!buf || len > DLSHIM_MSG_MAX || (len > 0 && !payload))
		return 0;
	h.magic = DLSHIM_PROTO_MAGIC;
	h.version = (uint16_t)DLSHIM_PROTO_VERSION;
	h.type = type;
	h.len = len;
	h.seq = seq;
	memcpy(buf, &h, HDR_LEN);
	if (len > 0)
		memcpy((char *)buf + HDR_LEN, payload, len);
	return HDR_LEN + (size_t)len;
}

/* On success *payload points just past the header (NULL for an empty
 * payload). Whenever at least a header's worth of bytes arrived, *hdr is
 * filled even on failure, so that a reply can echo hdr->seq; on failure
 * *payload is NULL. Any of hdr, payload and why may be NULL. */
int dlshim_msg_decode(const void *buf, size_t n, struct dlshim_msg_hdr *hdr, const void **payload,
		      const char **why)
{
	struct dlshim_msg_hdr h;
	const char *p;
	const char *reason;
	uint32_t want;

	if (payload)
		*payload = NULL;
	if (!buf || n < HDR_LEN) {
		reason = "truncated header";
		goto fail;
	}
	memcpy(&h, buf, HDR_LEN);
	if (hdr)
		*hdr = h;
	p = (const char *)buf + HDR_LEN;

	if (h.magic != DLSHIM_PROTO_MAGIC) {
		reason = "bad magic";
		goto fail;
	}
	if (h.version != DLSHIM_PROTO_VERSION) {
		reason = "unsupported protocol version";
		goto fail;
	}
	if (h.type == 0 || h.type >= DLSHIM_MSG_TYPE_MAX) {
		reason = "unknown message type";
		goto fail;
	}
	if (h.len > DLSHIM_MSG_MAX) {
		reason = "payload too large";
		goto fail;
	}
	if ((size_t)h.len != n - HDR_LEN) {
		reason = "declared length does not match the packet";
		goto fail;
	}
	want = payload_len[h.type];
	if (want != VARIABLE && h.len != want) {
		reason = "wrong payload size for the message type";
		goto fail;
	}
	if (h.type == DLSHIM_MSG_HELLO &&
	    !memchr(p + offsetof(struct dlshim_msg_hello, job), '\0',
		    sizeof(((struct dlshim_msg_hello *)0)->job))) {
		reason = "job name not NUL-terminated";
		goto fail;
	}
	if (h.type == DLSHIM_MSG_ROWS) {
		/* Two NUL-terminated names after the fixed part, nothing else. */
		size_t fixed = sizeof(struct dlshim_msg_rows);
		const char *names = (const char *)p + fixed;
		size_t rest = h.len > fixed ? h.len - fixed : 0;
		const char *z = rest ? memchr(names, '\0', rest) : NULL;
		if (z == NULL || z == names || (size_t)(z - names) + 2 > rest ||
		    memchr(z + 1, '\0', rest - (size_t)(z - names) - 1) != names + rest - 1 || z + 1 == names + rest - 1) {
			reason = "malformed rows request";
			goto fail;
		}
	}
	if (payload)
		*payload = h.len ? (const void *)p : NULL;
	if (why)
		*why = NULL;
	return 0;

fail:
	if (why)
		*why = reason;
	return -1;
}
