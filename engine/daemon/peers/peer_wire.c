/* Validation of coordinator <-> coordinator messages before any field is
 * used. Nothing here touches UCX or the coordinator's state, so the unit
 * tests and the fuzzer can hand these functions any bytes. */
#include <string.h>

#include "peer_wire.h"

int peer_wire_hello(const void *data, size_t len, int nnodes, int self, uint32_t block_size, struct peer_hello *h)
{
	if (len < sizeof(*h))
		return -1;
	memcpy(h, data, sizeof(*h));
	if (h->magic != PEER_MAGIC || h->version != PEER_VERSION || h->nnodes != (uint32_t)nnodes ||
	    h->node >= (uint32_t)nnodes || (int)h->node == self || h->rkey_len != len - sizeof(*h) ||
	    h->rkey_len == 0 || h->block_size != block_size)
		return -1;
	return 0;
}

int peer_wire_fetch(const void *data, size_t len, int nnodes, int self, struct peer_fetch *h,
		    const char *paths[1 + PEER_PREFETCH_MAX])
{
	if (len < sizeof(*h) + 2)
		return -1;
	memcpy(h, data, sizeof(*h));
	if (h->node >= (uint32_t)nnodes || (int)h->node == self || h->ncand > PEER_PREFETCH_MAX)
		return -1;
	const char *p = (const char *)data + sizeof(*h), *end = (const char *)data + len;
	uint32_t n = 0;
	/* Exactly 1 + ncand non-empty NUL-terminated paths fill the message. */
	while (p < end) {
		const char *z = memchr(p, 0, (size_t)(end - p));
		if (z == NULL || z == p || n == 1 + h->ncand)
			return -1;
		paths[n++] = p;
		p = z + 1;
	}
	return n == 1 + h->ncand ? (int)n : -1;
}

int peer_wire_fetch_r_head(const void *data, size_t len, int nnodes, int self, struct peer_fetch_r *h)
{
	if (len < sizeof(*h))
		return -1;
	memcpy(h, data, sizeof(*h));
	return h->node >= (uint32_t)nnodes || (int)h->node == self ? -1 : 0;
}

int peer_wire_fetch_r(const void *data, size_t len, uint32_t node, uint64_t req, uint32_t nitems, uint64_t nblocks,
		      struct peer_wire_rec *recs)
{
	const char *p = data, *end = (const char *)data + len;
	uint64_t seen = 0;
	int n = 0, outside = 0;
	if (nitems == 0 || nitems > 1 + PEER_PREFETCH_MAX)
		return PEER_WIRE_MALFORMED;
	/* Header in bounds, runs in bounds, each index once, index 0 first. */
	while (p < end) {
		struct peer_fetch_r h;
		if ((size_t)(end - p) < sizeof(h))
			return PEER_WIRE_MALFORMED;
		memcpy(&h, p, sizeof(h));
		p += sizeof(h);
		if (h.req != req || h.node != node || h.index >= nitems || (n == 0) != (h.index == 0) ||
		    (seen >> h.index & 1) || (size_t)(end - p) / sizeof(struct peer_run) < h.nruns)
			return PEER_WIRE_MALFORMED;
		seen |= 1ULL << h.index;
		/* Runs only matter for a record the home can serve. */
		for (uint32_t k = 0; h.status == 0 && k < h.nruns; k++) {
			struct peer_run r = peer_wire_run(p, k);
			outside |= r.count == 0 || (uint64_t)r.first + r.count > nblocks;
		}
		recs[n].h = h;
		recs[n].runs = p;
		n++;
		p += (size_t)h.nruns * sizeof(struct peer_run);
	}
	if (n == 0)
		return PEER_WIRE_MALFORMED;
	return outside ? PEER_WIRE_OUTSIDE : n;
}

struct peer_run peer_wire_run(const void *runs, uint32_t k)
{
	struct peer_run r;
	memcpy(&r, (const char *)runs + (size_t)k * sizeof(r), sizeof(r)); /* messages are not aligned */
	return r;
}

int peer_wire_done(const void *data, size_t len, int nnodes, struct peer_done *d)
{
	if (len != sizeof(*d))
		return -1;
	memcpy(d, data, sizeof(*d));
	return d->node < (uint32_t)nnodes ? 0 : -1;
}

int peer_wire_claim(const void *data, size_t len, int nnodes, int self, struct peer_claim *c)
{
	if (len != sizeof(*c))
		return -1;
	memcpy(c, data, sizeof(*c));
	return c->node >= (uint32_t)nnodes || (int)c->node == self || c->size == 0 || c->flags > PEER_CLAIM_F_CURRENT
		       ? -1
		       : 0;
}

int peer_wire_claim_r(const void *data, size_t len, int nnodes, int self, struct peer_claim_r *r, uint64_t *sync)
{
	if (len < sizeof(*r))
		return -1;
	memcpy(r, data, sizeof(*r));
	if (r->node >= (uint32_t)nnodes || (int)r->node == self || r->granted > 1 || r->nsync > PEER_CLAIM_SYNC_MAX ||
	    len != sizeof(*r) + (size_t)r->nsync * sizeof(uint64_t))
		return -1;
	memcpy(sync, (const char *)data + sizeof(*r), (size_t)r->nsync * sizeof(uint64_t));
	return 0;
}

int peer_wire_claim_r_fits(const struct peer_claim_r *r, uint32_t epoch)
{
	return r->epoch >= epoch ? 0 : -1;
}

int peer_wire_files_head(const void *data, size_t len, int nnodes, int self, struct peer_files *h)
{
	if (len < sizeof(*h))
		return -1;
	memcpy(h, data, sizeof(*h));
	return h->node >= (uint32_t)nnodes || (int)h->node == self ? -1 : 0;
}

int peer_wire_files_next(const char **cursor, const char *end, struct peer_file_ent *fe, const char **path)
{
	const char *p = *cursor;
	if ((size_t)(end - p) < sizeof(*fe))
		return -1;
	memcpy(fe, p, sizeof(*fe));
	p += sizeof(*fe);
	if (fe->len > (size_t)(end - p))
		return -1;
	*path = p;
	*cursor = p + fe->len;
	return 0;
}
