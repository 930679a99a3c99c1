/* Claims of jobs whose ranks run on several nodes (DDP across nodes). Each
 * node's coordinator decides its own part of such a job's requests, so
 * before it serves a file it asks the authority of the file's label group
 * whether the job consumed that file in this group epoch elsewhere, and
 * on a re-open whether the group's epoch is still the one of the first
 * open (claim_table.h). The authority is the node at
 * peer_path_hash(group key) % nodes: a function of the member list alone,
 * so every node agrees on it without waiting for file lists. A claim
 * costs one small round trip (none when this node is the authority); a
 * requester waits CLAIM_TIMEOUT_S at most. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "claim_table.h"
#include "daemon.h"
#include "peer.h"
#include "peer_wire.h"

#define CLAIM_TIMEOUT_S 5
_Static_assert(PEER_MODULE_SYNC_MAX == PEER_CLAIM_SYNC_MAX, "the coordinator's sync buffers hold a whole reply");

struct waiter {
	uint64_t req;
	int node;
	uint32_t epoch;
	int done;              /* 1 answered, -1 failed */
	int granted;
	uint32_t at;
	uint64_t *sync;        /* room for PEER_CLAIM_SYNC_MAX */
	uint32_t nsync;
	struct waiter *next;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct claim_table *t;
	struct waiter *w;
	uint64_t next_req;
	uint64_t asked_local, asked_remote, refused, unverified, answered, answered_refused, caught_up;
} C = {.mu = PTHREAD_MUTEX_INITIALIZER, .next_req = 1};

int peer_claims_start(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&C.cv, &a);
	pthread_condattr_destroy(&a);
	C.t = claim_table_new();
	return C.t ? 0 : -1;
}

static void unlink_waiter(struct waiter *w)
{
	for (struct waiter **pp = &C.w; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			return;
		}
}

/* Decide at the authority (this node, or for a peer's CLAIM). */
static int decide(const struct peer_claim *c, uint32_t *at, struct claim_sync *sync)
{
	if (c->flags & PEER_CLAIM_F_CURRENT)
		return claim_table_current(C.t, c->job, c->group, c->epoch, c->node, at, sync);
	return claim_table_claim(C.t, c->job, c->group, c->file, c->size, c->epoch, c->node, at, sync);
}

int peer_claim(const char *job, const char *group, uint32_t size, const char *path, uint32_t epoch, uint32_t *at,
	       uint64_t *sync, uint32_t *nsync)
{
	*nsync = 0;
	struct peer_claim c = {(uint32_t)peer_self(), epoch, 0, peer_path_hash(job), peer_path_hash(group),
			       path ? peer_path_hash(path) : 0, size ? size : 1, path ? 0 : PEER_CLAIM_F_CURRENT};
	int auth = (int)(c.group % (uint64_t)peer_nnodes());
	*at = epoch;
	if (auth == peer_self()) {
		struct claim_sync cs = {sync, PEER_CLAIM_SYNC_MAX, 0};
		int g = decide(&c, at, &cs);
		*nsync = cs.n;
		pthread_mutex_lock(&C.mu);
		C.asked_local++;
		C.refused += g == 0;
		C.unverified += g < 0;
		C.caught_up += g > 0 && *at > epoch;
		pthread_mutex_unlock(&C.mu);
		return g;
	}
	struct peer_claim *m = malloc(sizeof(*m));
	if (m == NULL || !peer_node_up(auth)) {
		free(m);
		pthread_mutex_lock(&C.mu);
		C.unverified++;
		pthread_mutex_unlock(&C.mu);
		return -1;
	}
	struct waiter w = {.node = auth, .epoch = epoch, .sync = sync};
	pthread_mutex_lock(&C.mu);
	w.req = C.next_req++;
	w.next = C.w;
	C.w = &w;
	C.asked_remote++;
	pthread_mutex_unlock(&C.mu);
	c.req = w.req;
	*m = c;
	peer_queue_send(auth, PEER_AM_CLAIM, m, sizeof(*m));
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += CLAIM_TIMEOUT_S;
	pthread_mutex_lock(&C.mu);
	while (!w.done)
		if (pthread_cond_timedwait(&C.cv, &C.mu, &dl) == ETIMEDOUT && !w.done)
			w.done = -1;
	unlink_waiter(&w);
	if (w.done < 0) {
		C.unverified++;
	} else {
		C.refused += !w.granted;
		C.caught_up += w.granted && w.at > epoch;
	}
	pthread_mutex_unlock(&C.mu);
	if (w.done < 0) {
		dlog(DLSHIM_LOG_WARN, "peers: claim authority node %d did not answer for %s; served unverified", auth,
		     path ? path : group);
		return -1;
	}
	*at = w.at;
	*nsync = w.nsync;
	return w.granted;
}

void peer_claims_on_claim(const void *data, size_t len)
{
	struct peer_claim c;
	if (peer_wire_claim(data, len, peer_nnodes(), peer_self(), &c) < 0) {
		dlog(DLSHIM_LOG_WARN, "peers: malformed CLAIM dropped");
		return;
	}
	uint32_t at;
	uint64_t sync[PEER_CLAIM_SYNC_MAX];
	struct claim_sync cs = {sync, PEER_CLAIM_SYNC_MAX, 0};
	/* Out of memory: refused in this epoch (the requester skips the
	 * file this epoch rather than risk serving it twice). */
	int g = decide(&c, &at, &cs);
	size_t rlen = sizeof(struct peer_claim_r) + cs.n * sizeof(uint64_t);
	struct peer_claim_r *r = malloc(rlen);
	if (r == NULL)
		return;
	*r = (struct peer_claim_r){(uint32_t)peer_self(), g == 1, c.req, at, cs.n};
	memcpy(r + 1, sync, cs.n * sizeof(uint64_t));
	pthread_mutex_lock(&C.mu);
	C.answered++;
	C.answered_refused += g != 1;
	pthread_mutex_unlock(&C.mu);
	peer_queue_send((int)c.node, PEER_AM_CLAIM_R, r, rlen);
}

void peer_claims_on_reply(const void *data, size_t len)
{
	struct peer_claim_r r;
	uint64_t sync[PEER_CLAIM_SYNC_MAX];
	if (peer_wire_claim_r(data, len, peer_nnodes(), peer_self(), &r, sync) < 0) {
		dlog(DLSHIM_LOG_WARN, "peers: malformed CLAIM_R dropped");
		return;
	}
	pthread_mutex_lock(&C.mu);
	for (struct waiter *w = C.w; w; w = w->next)
		if (w->req == r.req && w->node == (int)r.node && !w->done) {
			if (peer_wire_claim_r_fits(&r, w->epoch) < 0) {
				w->done = -1; /* an epoch older than the one asked: not an answer to this claim */
			} else {
				w->done = 1;
				w->granted = (int)r.granted;
				w->at = r.epoch;
				memcpy(w->sync, sync, r.nsync * sizeof(uint64_t));
				w->nsync = r.nsync;
			}
			pthread_cond_broadcast(&C.cv);
			break;
		}
	pthread_mutex_unlock(&C.mu);
}

void peer_claims_node_down(int i)
{
	pthread_mutex_lock(&C.mu);
	for (struct waiter *w = C.w; w; w = w->next)
		if (w->node == i && !w->done)
			w->done = -1;
	pthread_cond_broadcast(&C.cv);
	pthread_mutex_unlock(&C.mu);
}

size_t peer_claims_json(char *buf, size_t cap)
{
	size_t held = C.t ? claim_table_count(C.t) : 0;
	pthread_mutex_lock(&C.mu);
	int n = snprintf(buf, cap,
			 "\"claims\":{\"asked_local\":%llu,\"asked_remote\":%llu,\"refused\":%llu,\"unverified\":%llu,"
			 "\"caught_up\":%llu,\"answered\":%llu,\"answered_refused\":%llu,\"groups\":%zu}",
			 (unsigned long long)C.asked_local, (unsigned long long)C.asked_remote,
			 (unsigned long long)C.refused, (unsigned long long)C.unverified, (unsigned long long)C.caught_up,
			 (unsigned long long)C.answered, (unsigned long long)C.answered_refused, held);
	pthread_mutex_unlock(&C.mu);
	return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
