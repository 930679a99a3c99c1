/* libFuzzer target for the checks on coordinator <-> coordinator messages
 * (engine/daemon/peers/peer_wire.c).
 *
 * Input: one selector byte (which message: 0 HELLO, 1 FILES, 2 FETCH,
 * 3 FETCH_R, 4 DONE, 5 CLAIM, 6 CLAIM_R; taken modulo 7), then the message
 * as a peer would send it. The cluster is fixed: 3 nodes, we are node 0, a FETCH_R answers
 * request 7 to node 1 that named 3 files, the home's segment has 100 blocks.
 * What is accepted must be safe to use:
 *   - HELLO: the rkey lies inside the message and is not empty;
 *   - FILES: every entry's path lies inside the message;
 *   - FETCH: 1 + ncand paths, each non-empty and NUL-terminated inside it;
 *   - FETCH_R: records for this request only, index 0 first, each index
 *     once and below 3, every run array inside the message, and (unless
 *     refused as outside) every run of a servable record non-empty and
 *     inside the segment;
 *   - DONE: from a node of the cluster;
 *   - CLAIM: from another node, for a non-empty group, known flags;
 *   - CLAIM_R: from another node, granted 0 or 1, its path hashes exactly
 *     filling the message (at most 64), and fitting a claim of epoch 3 only
 *     when it names epoch 3 or later.
 * Built by `make fuzz` (clang, libFuzzer) and, for `make test`, by gcc with
 * ASan/UBSan together with tests/fuzz/replay.c over tests/fuzz/corpus/peer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../engine/daemon/peers/peer_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                  \
	do {                                                                                      \
		if (!(c)) {                                                                       \
			fprintf(stderr, "fuzz_peer: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			abort();                                                                  \
		}                                                                                 \
	} while (0)

enum { NODES = 3, SELF = 0, HOME = 1, REQ = 7, ITEMS = 3, BLOCKS = 100, BS = 65536 };

static int inside(const char *p, size_t n, const char *m, size_t len)
{
	return p >= m && (size_t)(p - m) <= len && n <= len - (size_t)(p - m);
}

static void hello(const char *m, size_t len)
{
	struct peer_hello h;
	if (peer_wire_hello(m, len, NODES, SELF, BS, &h) < 0)
		return;
	CHECK(h.rkey_len > 0 && sizeof(h) + h.rkey_len == len);
	CHECK(h.node < NODES && h.node != SELF);
}

static void files(const char *m, size_t len)
{
	struct peer_files h;
	if (peer_wire_files_head(m, len, NODES, SELF, &h) < 0)
		return;
	const char *p = m + sizeof(h), *end = m + len, *path;
	struct peer_file_ent fe;
	for (uint32_t i = 0; i < h.count && i < 100000; i++) {
		if (peer_wire_files_next(&p, end, &fe, &path) < 0)
			break;
		CHECK(inside(path, fe.len, m, len));
		CHECK(p == path + fe.len);
	}
}

static void fetch(const char *m, size_t len)
{
	struct peer_fetch h;
	const char *paths[1 + PEER_PREFETCH_MAX];
	int n = peer_wire_fetch(m, len, NODES, SELF, &h, paths);
	if (n < 0)
		return;
	CHECK((uint32_t)n == 1 + h.ncand && h.ncand <= PEER_PREFETCH_MAX);
	for (int i = 0; i < n; i++) {
		size_t l = strnlen(paths[i], len - (size_t)(paths[i] - m));
		CHECK(inside(paths[i], l + 1, m, len) && l > 0);
	}
}

static void fetch_r(const char *m, size_t len)
{
	struct peer_fetch_r h;
	struct peer_wire_rec recs[ITEMS];
	if (peer_wire_fetch_r_head(m, len, NODES, SELF, &h) < 0)
		return;
	int n = peer_wire_fetch_r(m, len, HOME, REQ, ITEMS, BLOCKS, recs);
	if (n < 0) {
		CHECK(n == PEER_WIRE_MALFORMED || n == PEER_WIRE_OUTSIDE);
		return;
	}
	CHECK(n >= 1 && n <= ITEMS && recs[0].h.index == 0);
	unsigned seen = 0;
	for (int k = 0; k < n; k++) {
		const struct peer_fetch_r *r = &recs[k].h;
		CHECK(r->req == REQ && r->node == HOME && r->index < ITEMS && !(seen >> r->index & 1));
		seen |= 1u << r->index;
		CHECK(inside(recs[k].runs, (size_t)r->nruns * sizeof(struct peer_run), m, len));
		for (uint32_t i = 0; r->status == 0 && i < r->nruns; i++) {
			struct peer_run run = peer_wire_run(recs[k].runs, i);
			CHECK(run.count > 0 && (uint64_t)run.first + run.count <= BLOCKS);
		}
	}
}

static void done(const char *m, size_t len)
{
	struct peer_done d;
	if (peer_wire_done(m, len, NODES, &d) == 0)
		CHECK(d.node < NODES && len == sizeof(d));
}

static void claim(const char *m, size_t len)
{
	struct peer_claim c;
	if (peer_wire_claim(m, len, NODES, SELF, &c) < 0)
		return;
	CHECK(len == sizeof(c) && c.node < NODES && c.node != SELF && c.size > 0 && c.flags <= PEER_CLAIM_F_CURRENT);
}

static void claim_r(const char *m, size_t len)
{
	struct peer_claim_r r;
	uint64_t sync[PEER_CLAIM_SYNC_MAX];
	if (peer_wire_claim_r(m, len, NODES, SELF, &r, sync) < 0)
		return;
	CHECK(r.nsync <= PEER_CLAIM_SYNC_MAX && len == sizeof(r) + r.nsync * sizeof(uint64_t));
	CHECK(r.node < NODES && r.node != SELF && r.granted <= 1);
	if (peer_wire_claim_r_fits(&r, 3) == 0)
		CHECK(r.epoch >= 3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const char *m = (const char *)data + 1;
	size_t len = size - 1;
	switch (data[0] % 7) {
	case 0: hello(m, len); break;
	case 1: files(m, len); break;
	case 2: fetch(m, len); break;
	case 3: fetch_r(m, len); break;
	case 4: done(m, len); break;
	case 5: claim(m, len); break;
	default: claim_r(m, len); break;
	}
	return 0;
}
