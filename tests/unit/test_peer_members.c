/* DLSHIM_PEERS / DLSHIM_NODE parsing: good lists, and bad input that must
 * be refused with a message naming the variable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "../../engine/daemon/peers/peer_members.c"

static struct peer_addr a[PEER_MAX_NODES];

static void test_good(void **state)
{
	(void)state;
	char err[256];
	int self;
	assert_int_equal(peer_parse_members("10.0.0.1:4000,10.0.0.2:4001,[fe80::1]:5", "1", a, PEER_MAX_NODES, &self, err,
					    sizeof(err)),
			 3);
	assert_int_equal(self, 1);
	assert_string_equal(a[0].host, "10.0.0.1");
	assert_string_equal(a[1].port, "4001");
	assert_string_equal(a[2].host, "fe80::1");
	assert_int_equal(peer_parse_members("n0:1,n1:2", "n1", a, PEER_MAX_NODES, &self, err, sizeof(err)), 2);
	assert_int_equal(self, 1);
	assert_int_equal(peer_parse_members("n0:1,n1:2", "n0:1", a, PEER_MAX_NODES, &self, err, sizeof(err)), 2);
	assert_int_equal(self, 0);
}

static void bad(const char *peers, const char *node, const char *want)
{
	char err[256] = "";
	int self;
	assert_int_equal(peer_parse_members(peers, node, a, PEER_MAX_NODES, &self, err, sizeof(err)), -1);
	if (strstr(err, want) == NULL)
		fail_msg("'%s' / '%s': message '%s' lacks '%s'", peers, node, err, want);
}

static void test_bad(void **state)
{
	(void)state;
	bad("n0:1,n1:2", "2", "DLSHIM_NODE=2 is out of range");
	bad("n0:1,n1:2", "", "DLSHIM_NODE is not");
	bad("n0:1,n1:2", "n9", "is not in");
	bad("n0:1,n0:2", "n0", "matches several");
	bad("n0", "0", "not host:port");
	bad("n0:0", "0", "not host:port");
	bad("n0:70000", "0", "not host:port");
	bad("n0:1,,n1:2", "0", "DLSHIM_PEERS");
	bad("n0:1,n0:1", "0", "twice");
	bad("", "0", "empty");
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_good), cmocka_unit_test(test_bad)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
