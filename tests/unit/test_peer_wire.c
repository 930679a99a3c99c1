/* Checks on coordinator <-> coordinator messages: what a well-behaved peer
 * sends is accepted with every field intact, and each way of getting one
 * field wrong is refused. The cluster: 3 nodes, we are node 0; a FETCH_R
 * answers our request 7 to node 1, which named 3 files; node 1's segment
 * has 100 blocks. Messages sit at an odd address (UCX does not align them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "../../engine/daemon/peers/peer_wire.c"

enum { NODES = 3, SELF = 0, HOME = 1, REQ = 7, ITEMS = 3, BLOCKS = 100, BS = 16384 };

static unsigned char raw[4096 + 1];
static unsigned char *const buf = raw + 1; /* misaligned on purpose */
static size_t len;

static void put(const void *p, size_t n)
{
	memcpy(buf + len, p, n);
	len += n;
}

static struct peer_hello good_hello(void)
{
	return (struct peer_hello){.magic = PEER_MAGIC, .version = PEER_VERSION, .node = 2, .nnodes = NODES,
				   .incarnation = 99, .base = 0x7f0000000000, .data_off = 4096, .nblocks = BLOCKS,
				   .block_size = BS, .want_reply = 1, .rkey_len = 5};
}

static int try_hello(struct peer_hello h, size_t rkey)
{
	len = 0;
	put(&h, sizeof(h));
	put("RKEYBYTES", rkey);
	struct peer_hello out;
	return peer_wire_hello(buf, len, NODES, SELF, BS, &out);
}

static void test_hello(void **state)
{
	(void)state;
	struct peer_hello h = good_hello(), out;
	assert_int_equal(try_hello(h, 5), 0);
	assert_int_equal(peer_wire_hello(buf, len, NODES, SELF, BS, &out), 0);
	assert_memory_equal(&out, &h, sizeof(h));
	assert_memory_equal(buf + sizeof(h), "RKEYB", 5);

	assert_int_equal(try_hello(h, 4), -1); /* rkey shorter than announced */
	assert_int_equal(try_hello(h, 6), -1);
	struct peer_hello b;
	b = h, b.magic ^= 1;
	assert_int_equal(try_hello(b, 5), -1);
	b = h, b.version = PEER_VERSION + 1;
	assert_int_equal(try_hello(b, 5), -1);
	b = h, b.nnodes = NODES + 1;
	assert_int_equal(try_hello(b, 5), -1);
	b = h, b.node = NODES;
	assert_int_equal(try_hello(b, 5), -1);
	b = h, b.node = SELF;
	assert_int_equal(try_hello(b, 5), -1);
	b = h, b.block_size = BS * 2;
	assert_int_equal(try_hello(b, 5), -1);
	b = h, b.rkey_len = 0;
	assert_int_equal(try_hello(b, 0), -1);
	assert_int_equal(peer_wire_hello(buf, sizeof(h) - 1, NODES, SELF, BS, &out), -1);
}

static int try_fetch(uint32_t node, uint32_t ncand, const char *paths, size_t plen, const char **got)
{
	struct peer_fetch h = {.node = node, .ncand = ncand, .req = 42}, out;
	len = 0;
	put(&h, sizeof(h));
	put(paths, plen);
	const char *p[1 + PEER_PREFETCH_MAX];
	int n = peer_wire_fetch(buf, len, NODES, SELF, &out, p);
	if (n > 0) {
		assert_int_equal(out.req, 42);
		for (int i = 0; i < n && got; i++)
			got[i] = p[i];
	}
	return n;
}

static void test_fetch(void **state)
{
	(void)state;
	static const char three[] = "/d/a\0/d/bb\0/d/ccc"; /* + the final NUL of the literal */
	const char *got[3];
	assert_int_equal(try_fetch(1, 2, three, sizeof(three), got), 3);
	assert_string_equal(got[0], "/d/a");
	assert_string_equal(got[1], "/d/bb");
	assert_string_equal(got[2], "/d/ccc");
	assert_int_equal(try_fetch(2, 0, "/x", 3, got), 1);
	assert_string_equal(got[0], "/x");

	assert_int_equal(try_fetch(1, 1, three, sizeof(three), NULL), -1); /* one path too many */
	assert_int_equal(try_fetch(1, 3, three, sizeof(three), NULL), -1); /* one too few */
	assert_int_equal(try_fetch(1, 2, three, sizeof(three) - 1, NULL), -1); /* last one unterminated */
	assert_int_equal(try_fetch(1, 1, "/a\0\0/b", 7, NULL), -1);           /* an empty path */
	assert_int_equal(try_fetch(SELF, 0, "/x", 3, NULL), -1);
	assert_int_equal(try_fetch(NODES, 0, "/x", 3, NULL), -1);
	assert_int_equal(try_fetch(1, PEER_PREFETCH_MAX + 1, "/x", 3, NULL), -1);
	assert_int_equal(try_fetch(1, 0, "", 0, NULL), -1);
}

static void rec(uint32_t node, uint64_t req, uint32_t index, int32_t status, const struct peer_run *runs, uint32_t nruns)
{
	struct peer_fetch_r h = {.node = node, .status = status, .req = req, .size = 40000, .gen = 5,
				 .slot = 9, .nruns = nruns, .index = index};
	put(&h, sizeof(h));
	put(runs, nruns * sizeof(*runs));
}

static int check_r(void)
{
	struct peer_wire_rec recs[ITEMS];
	return peer_wire_fetch_r(buf, len, HOME, REQ, ITEMS, BLOCKS, recs);
}

static void test_fetch_r(void **state)
{
	(void)state;
	const struct peer_run a[2] = {{3, 2}, {10, 1}}, b[1] = {{97, 3}}, zero[1] = {{5, 0}}, past[1] = {{98, 3}};
	len = 0;
	rec(HOME, REQ, 0, 0, a, 2);
	rec(HOME, REQ, 2, 0, b, 1);
	struct peer_wire_rec recs[ITEMS];
	assert_int_equal(peer_wire_fetch_r(buf, len, HOME, REQ, ITEMS, BLOCKS, recs), 2);
	assert_int_equal(recs[0].h.index, 0);
	assert_int_equal(recs[0].h.nruns, 2);
	assert_int_equal(peer_wire_run(recs[0].runs, 1).first, 10);
	assert_int_equal(recs[1].h.index, 2);
	assert_int_equal(peer_wire_run(recs[1].runs, 0).count, 3);
	struct peer_fetch_r head;
	assert_int_equal(peer_wire_fetch_r_head(buf, len, NODES, SELF, &head), 0);
	assert_int_equal(head.req, REQ);
	assert_int_equal(check_r(), 2);
	assert_int_equal(peer_wire_fetch_r(buf, len - 1, HOME, REQ, ITEMS, BLOCKS, recs), PEER_WIRE_MALFORMED);

	/* A refusal needs no runs, and its runs are not judged. */
	len = 0;
	rec(HOME, REQ, 0, 2, past, 1);
	assert_int_equal(check_r(), 1);

	len = 0; /* another request's reply */
	rec(HOME, REQ + 1, 0, 0, a, 2);
	assert_int_equal(check_r(), PEER_WIRE_MALFORMED);
	len = 0; /* from another node */
	rec(2, REQ, 0, 0, a, 2);
	assert_int_equal(check_r(), PEER_WIRE_MALFORMED);
	len = 0; /* a candidate first */
	rec(HOME, REQ, 1, 0, a, 2);
	assert_int_equal(check_r(), PEER_WIRE_MALFORMED);
	len = 0; /* the wanted file twice */
	rec(HOME, REQ, 0, 0, a, 2);
	rec(HOME, REQ, 0, 0, a, 2);
	assert_int_equal(check_r(), PEER_WIRE_MALFORMED);
	len = 0; /* a candidate twice */
	rec(HOME, REQ, 0, 0, a, 2);
	rec(HOME, REQ, 1, 0, a, 2);
	rec(HOME, REQ, 1, 0, a, 2);
	assert_int_equal(check_r(), PEER_WIRE_MALFORMED);
	len = 0; /* an index we never named */
	rec(HOME, REQ, 0, 0, a, 2);
	rec(HOME, REQ, ITEMS, 0, a, 2);
	assert_int_equal(check_r(), PEER_WIRE_MALFORMED);
	len = 0; /* runs announced past the end */
	rec(HOME, REQ, 0, 0, a, 2);
	len -= sizeof(a[1]);
	assert_int_equal(check_r(), PEER_WIRE_MALFORMED);
	len = 0; /* a trailing partial header */
	rec(HOME, REQ, 0, 0, a, 2);
	put("xx", 2);
	assert_int_equal(check_r(), PEER_WIRE_MALFORMED);
	len = 0;
	assert_int_equal(check_r(), PEER_WIRE_MALFORMED);
	assert_int_equal(peer_wire_fetch_r_head(buf, 0, NODES, SELF, &head), -1);

	len = 0; /* runs outside the segment, or empty */
	rec(HOME, REQ, 0, 0, past, 1);
	assert_int_equal(check_r(), PEER_WIRE_OUTSIDE);
	len = 0;
	rec(HOME, REQ, 0, 0, a, 2);
	rec(HOME, REQ, 1, 0, zero, 1);
	assert_int_equal(check_r(), PEER_WIRE_OUTSIDE);
	len = 0; /* ends exactly at the last block: fine */
	rec(HOME, REQ, 0, 0, b, 1);
	assert_int_equal(check_r(), 1);
}

static void test_done_and_files(void **state)
{
	(void)state;
	struct peer_done d = {.node = 2, .slot = 4, .req = 7, .gen = 3}, out;
	len = 0;
	put(&d, sizeof(d));
	assert_int_equal(peer_wire_done(buf, len, NODES, &out), 0);
	assert_memory_equal(&out, &d, sizeof(d));
	assert_int_equal(peer_wire_done(buf, len - 1, NODES, &out), -1);
	put("", 1);
	assert_int_equal(peer_wire_done(buf, len, NODES, &out), -1);
	d.node = NODES;
	len = 0;
	put(&d, sizeof(d));
	assert_int_equal(peer_wire_done(buf, len, NODES, &out), -1);

	struct peer_files h = {.node = 2, .count = 2, .incarnation = 1};
	struct peer_file_ent e1 = {100, 5, 6}, e2 = {200, 6, 9};
	len = 0;
	put(&h, sizeof(h));
	put(&e1, sizeof(e1));
	put("/d/a/1", 6);
	put(&e2, sizeof(e2));
	put("/d/b/22.x", 9);
	struct peer_files hh;
	assert_int_equal(peer_wire_files_head(buf, len, NODES, SELF, &hh), 0);
	assert_int_equal(hh.count, 2);
	const char *p = (const char *)buf + sizeof(h), *end = (const char *)buf + len, *path;
	struct peer_file_ent fe;
	assert_int_equal(peer_wire_files_next(&p, end, &fe, &path), 0);
	assert_int_equal(fe.size, 100);
	assert_memory_equal(path, "/d/a/1", 6);
	assert_int_equal(peer_wire_files_next(&p, end, &fe, &path), 0);
	assert_int_equal(fe.len, 9);
	assert_memory_equal(path, "/d/b/22.x", 9);
	assert_ptr_equal(p, end);
	assert_int_equal(peer_wire_files_next(&p, end, &fe, &path), -1);
	/* A path running past the end, and a cut entry header. */
	p = (const char *)buf + sizeof(h);
	assert_int_equal(peer_wire_files_next(&p, end - 1, &fe, &path), 0);
	assert_int_equal(peer_wire_files_next(&p, end - 1, &fe, &path), -1);
	p = (const char *)buf + sizeof(h);
	assert_int_equal(peer_wire_files_next(&p, p + sizeof(fe) - 1, &fe, &path), -1);
	h.node = SELF;
	memcpy(buf, &h, sizeof(h));
	assert_int_equal(peer_wire_files_head(buf, len, NODES, SELF, &hh), -1);
}

static void test_claims(void **state)
{
	(void)state;
	struct peer_claim c = {.node = 2, .epoch = 4, .req = 9, .job = 1, .group = 2, .file = 3, .size = 30, .flags = 0}, co;
	len = 0;
	put(&c, sizeof(c));
	assert_int_equal(peer_wire_claim(buf, len, NODES, SELF, &co), 0);
	assert_memory_equal(&co, &c, sizeof(c));
	assert_int_equal(peer_wire_claim(buf, len - 1, NODES, SELF, &co), -1);
	struct peer_claim bad[] = {c, c, c, c};
	bad[0].node = SELF;
	bad[1].node = NODES;
	bad[2].size = 0;
	bad[3].flags = PEER_CLAIM_F_CURRENT << 1;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		len = 0;
		put(&bad[i], sizeof(bad[i]));
		assert_int_equal(peer_wire_claim(buf, len, NODES, SELF, &co), -1);
	}
	c.flags = PEER_CLAIM_F_CURRENT;
	len = 0;
	put(&c, sizeof(c));
	assert_int_equal(peer_wire_claim(buf, len, NODES, SELF, &co), 0);

	struct peer_claim_r r = {.node = HOME, .granted = 0, .req = 9, .epoch = 4, .nsync = 2}, ro;
	uint64_t hs[2] = {0x1111, 0x2222}, got[PEER_CLAIM_SYNC_MAX];
	len = 0;
	put(&r, sizeof(r));
	put(hs, sizeof(hs));
	assert_int_equal(peer_wire_claim_r(buf, len, NODES, SELF, &ro, got), 0);
	assert_memory_equal(&ro, &r, sizeof(r));
	assert_memory_equal(got, hs, sizeof(hs));
	assert_int_equal(peer_wire_claim_r_fits(&ro, 4), 0);
	assert_int_equal(peer_wire_claim_r_fits(&ro, 3), 0);
	/* An answer naming an epoch older than the one asked. */
	assert_int_equal(peer_wire_claim_r_fits(&ro, 5), -1);
	/* The hashes must be exactly nsync. */
	put("", 1);
	assert_int_equal(peer_wire_claim_r(buf, len, NODES, SELF, &ro, got), -1);
	assert_int_equal(peer_wire_claim_r(buf, len - 9, NODES, SELF, &ro, got), -1);
	struct peer_claim_r rbad[] = {r, r, r, r};
	rbad[0].node = SELF;
	rbad[1].node = NODES;
	rbad[2].granted = 2;
	rbad[3].nsync = PEER_CLAIM_SYNC_MAX + 1;
	for (size_t i = 0; i < sizeof(rbad) / sizeof(rbad[0]); i++) {
		len = 0;
		put(&rbad[i], sizeof(rbad[i]));
		for (uint32_t k = 0; k < rbad[i].nsync && k < PEER_CLAIM_SYNC_MAX + 1; k++)
			put(hs, sizeof(hs[0]));
		assert_int_equal(peer_wire_claim_r(buf, len, NODES, SELF, &ro, got), -1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello),
		cmocka_unit_test(test_fetch),
		cmocka_unit_test(test_fetch_r),
		cmocka_unit_test(test_done_and_files),
		cmocka_unit_test(test_claims),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
