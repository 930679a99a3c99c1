/* DLSHIM_PEERS / DLSHIM_NODE: who is in the cluster and which one we are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer.h"

static int valid_port(const char *p)
{
	char *end;
	long v = strtol(p, &end, 10);
	return *p && *end == 0 && v > 0 && v < 65536;
}

int peer_parse_members(const char *peers, const char *node, struct peer_addr *out, int max, int *self,
		       char *err, size_t errlen)
{
	int n = 0;
	const char *p = peers;
	while (*p) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == 0 || l >= sizeof(out[0].name)) {
			snprintf(err, errlen, "DLSHIM_PEERS='%s' is not valid: expected host:port,host:port,...", peers);
			return -1;
		}
		if (n == max) {
			snprintf(err, errlen, "DLSHIM_PEERS lists more than %d nodes", max);
			return -1;
		}
		struct peer_addr *a = &out[n];
		memcpy(a->name, p, l);
		a->name[l] = 0;
		/* The last colon separates the port, so [v6]:port works too. */
		char *c = strrchr(a->name, ':');
		if (c == NULL || c == a->name || !valid_port(c + 1) || strlen(c + 1) >= sizeof(a->port)) {
			snprintf(err, errlen, "DLSHIM_PEERS entry '%s' is not host:port (port 1-65535)", a->name);
			return -1;
		}
		size_t hl = (size_t)(c - a->name);
		const char *h = a->name;
		if (h[0] == '[' && hl > 2 && h[hl - 1] == ']') {
			h++;
			hl -= 2;
		}
		memcpy(a->host, h, hl);
		a->host[hl] = 0;
		snprintf(a->port, sizeof(a->port), "%s", c + 1);
		for (int i = 0; i < n; i++)
			if (strcmp(out[i].name, a->name) == 0) {
				snprintf(err, errlen, "DLSHIM_PEERS lists %s twice", a->name);
				return -1;
			}
		n++;
		p = e ? e + 1 : p + l;
	}
	if (n < 1) {
		snprintf(err, errlen, "DLSHIM_PEERS is empty");
		return -1;
	}
	*self = -1;
	if (node == NULL || node[0] == 0) {
		snprintf(err, errlen, "DLSHIM_PEERS is set but DLSHIM_NODE is not: name this node (an index into "
				      "DLSHIM_PEERS or one of its host:port entries)");
		return -1;
	}
	char *end;
	long idx = strtol(node, &end, 10);
	if (*end == 0) {
		if (idx < 0 || idx >= n) {
			snprintf(err, errlen, "DLSHIM_NODE=%s is out of range: DLSHIM_PEERS has %d nodes (0-%d)", node, n,
				 n - 1);
			return -1;
		}
		*self = (int)idx;
		return n;
	}
	int hits = 0;
	for (int i = 0; i < n; i++)
		if (strcmp(out[i].name, node) == 0 || strcmp(out[i].host, node) == 0) {
			*self = i;
			hits++;
		}
	if (hits != 1) {
		snprintf(err, errlen, "DLSHIM_NODE=%s %s DLSHIM_PEERS: expected an index or one host:port of the list",
			 node, hits ? "matches several entries of" : "is not in");
		return -1;
	}
	return n;
}
