/* The home side of a remote fetch: a peer asks for one of our files; we put
 * it in our cache like a local miss (under a job of its own, "peers"), pin
 * it, and answer with the slot's block runs for the requester's RMA gets.
 * The pin lasts until the requester's DONE, its restart, or a deadline, so
 * a vanished requester cannot hold cache space for ever. Loads run in two
 * threads of their own: the transport thread never waits for a disk. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "dlshim/shm.h"
#include "dlshim/fileid.h"
#include "peer.h"

#define HOME_THREADS 2
#define PIN_DEADLINE_S 30

struct req {
	int node;
	uint64_t req;
	int npaths;
	char *paths[1 + PEER_PREFETCH_MAX]; /* [0] on demand, then prefetch candidates */
	struct req *next;
};

struct hpin {
	int node;
	uint64_t req, gen, size;
	uint32_t slot;
	time_t deadline;
	struct hpin *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct req *head, *tail;
static struct hpin *pins;
static int job = -1;
static uint64_t served, served_bytes, refused, prefetch_sent, prefetch_loaded;

static void req_free(struct req *r)
{
	for (int i = 0; i < r->npaths; i++)
		free(r->paths[i]);
	free(r);
}

void peer_home_request(int node, uint64_t rq, const char *const *paths, int npaths)
{
	struct req *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return; /* the requester times out */
	for (int i = 0; i < npaths && i < 1 + PEER_PREFETCH_MAX; i++) {
		if ((r->paths[i] = strdup(paths[i])) == NULL) {
			req_free(r);
			return;
		}
		r->npaths = i + 1;
	}
	r->node = node;
	r->req = rq;
	r->next = NULL;
	pthread_mutex_lock(&mu);
	if (tail)
		tail->next = r;
	else
		head = r;
	tail = r;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

/* Block runs of a published, pinned slot. Called with D.mu. */
static uint32_t slot_runs(uint32_t slot, uint64_t size, struct peer_run *runs, uint32_t max)
{
	const struct dlshim_shm_header *h = D.shm_base;
	const struct dlshim_shm_slot *s = (const void *)((const char *)D.shm_base + h->slots_off) ;
	const uint32_t *next = (const void *)((const char *)D.shm_base + h->next_off);
	if (slot >= h->nslots)
		return UINT32_MAX;
	uint64_t need = (size + DLSHIM_BLOCK_SIZE - 1) / DLSHIM_BLOCK_SIZE;
	uint32_t b = s[slot].first_block, n = 0;
	for (uint64_t k = 0; k < need; k++) {
		if (b >= h->nblocks)
			return UINT32_MAX;
		if (n && runs[n - 1].first + runs[n - 1].count == b)
			runs[n - 1].count++;
		else if (n == max)
			return UINT32_MAX;
		else
			runs[n++] = (struct peer_run){b, 1};
		b = next[b];
	}
	return n;
}

/* Put the file in the cache and pin it; 0 or an errno value. *cold says
 * whether that took a disk read. */
static int load_pinned(const char *path, uint32_t *slot, uint64_t *gen, uint64_t *size, int64_t *mtime, int *cold)
{
	*cold = 0;
	uint64_t lsize;
	int64_t lmt;
	if (peer_catalog_local(path, &lsize, &lmt) < 0)
		return ENOENT; /* only files of our own dataset part are served */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
	if (fd < 0)
		return errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return EINVAL;
	}
	struct dlshim_file_id id = dlshim_stat_version(&st);
	*size = id.size;
	*mtime = id.mtime_ns;
	struct dlshim_open_result res;
	int rc = 0;
	pthread_mutex_lock(&D.mu);
	daemon_engine_open(job, &id, 0, &res);
	if (res.kind == DLSHIM_OPEN_HIT) {
		*slot = res.slot;
		*gen = res.gen;
	} else if (res.kind == DLSHIM_OPEN_LOAD) {
		*cold = 1;
		pthread_mutex_unlock(&D.mu);
		int ok = loader_load_now(fd, res.slot, id.size) == 0;
		pthread_mutex_lock(&D.mu);
		*gen = dlshim_engine_load_done(D.eng, job, res.item, ok);
		*slot = res.slot;
		pthread_cond_broadcast(&D.loaded);
		rc = *gen ? 0 : EIO;
	} else {
		rc = ENOSPC; /* too big for the cache, or nothing evictable */
	}
	pthread_mutex_unlock(&D.mu);
	close(fd);
	return rc;
}

/* A prefetch candidate to load from disk with the others (cold home). */
struct cold {
	int fd;
	uint32_t item, slot, index;
	uint64_t size;
	int64_t mtime;
};

/* Pin a prefetch candidate if it is resident here; 0 or an errno value.
 * With `c` (this request already read the disk for the wanted file: the
 * home is cold for this part of the group, as redox refills a whole chunk)
 * an absent candidate gets a slot and an open descriptor in *c instead, to
 * be read with the others in one batch (EINPROGRESS). */
static int candidate_pinned(const char *path, uint32_t *slot, uint64_t *gen, uint64_t *size, int64_t *mtime,
			    struct cold *c)
{
	uint64_t lsize;
	int64_t lmt;
	struct stat st;
	if (peer_catalog_local(path, &lsize, &lmt) < 0 || stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return ENOENT;
	struct dlshim_file_id id = dlshim_stat_version(&st);
	int fd = -1;
	if (c) {
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK);
		struct stat fst;
		if (fd >= 0 && (fstat(fd, &fst) < 0 || fst.st_dev != st.st_dev || fst.st_ino != st.st_ino)) {
			close(fd); /* replaced between stat and open: not now */
			fd = -1;
		}
	}
	struct dlshim_open_result *res = malloc(sizeof(*res));
	if (res == NULL) {
		if (fd >= 0)
			close(fd);
		return ENOMEM;
	}
	int rc = EAGAIN;
	pthread_mutex_lock(&D.mu);
	uint32_t item = dlshim_engine_find_item(D.eng, id.dev, id.ino);
	int resident = item != DLSHIM_NO_ITEM && dlshim_engine_item_resident(D.eng, item);
	if (resident || fd >= 0) {
		dlshim_engine_open(D.eng, job, &id, DLSHIM_OPEN_F_NOWAIT, res);
		if (res->kind == DLSHIM_OPEN_HIT) {
			*slot = res->slot;
			*gen = res->gen;
			*size = id.size;
			*mtime = id.mtime_ns;
			rc = 0;
		} else if (res->kind == DLSHIM_OPEN_LOAD && fd >= 0) {
			*c = (struct cold){fd, res->item, res->slot, 0, id.size, id.mtime_ns};
			fd = -1;
			rc = EINPROGRESS;
		} else if (res->kind == DLSHIM_OPEN_LOAD) {
			/* Resident but stale: not worth a disk read now. */
			dlshim_engine_load_done(D.eng, job, res->item, 0);
			pthread_cond_broadcast(&D.loaded);
		}
	}
	pthread_mutex_unlock(&D.mu);
	if (fd >= 0)
		close(fd);
	free(res);
	return rc;
}

/* Append one FETCH_R record (header + block runs) for a pinned slot; on
 * failure the slot is unpinned and nothing is appended. */
static int add_record(char **m, size_t *len, struct peer_fetch_r *h)
{
	uint64_t need = (h->size + DLSHIM_BLOCK_SIZE - 1) / DLSHIM_BLOCK_SIZE;
	uint32_t max = need < (1u << 20) ? (uint32_t)need + 1 : 1u << 20;
	char *nm = realloc(*m, *len + sizeof(*h) + max * sizeof(struct peer_run));
	if (nm == NULL) {
		pthread_mutex_lock(&D.mu);
		dlshim_engine_release(D.eng, job, h->slot, h->gen, 0, 0);
		pthread_mutex_unlock(&D.mu);
		return -1;
	}
	*m = nm;
	pthread_mutex_lock(&D.mu);
	uint32_t nruns = slot_runs(h->slot, h->size, (struct peer_run *)(nm + *len + sizeof(*h)), max);
	if (nruns == UINT32_MAX) /* too fragmented to describe: refuse, unpin */
		dlshim_engine_release(D.eng, job, h->slot, h->gen, 0, 0);
	pthread_mutex_unlock(&D.mu);
	if (nruns == UINT32_MAX)
		return -1;
	h->nruns = nruns;
	memcpy(nm + *len, h, sizeof(*h));
	*len += sizeof(*h) + nruns * sizeof(struct peer_run);
	return 0;
}

static void remember_pin(int node, uint64_t rq, const struct peer_fetch_r *h)
{
	struct hpin *p = malloc(sizeof(*p));
	if (p == NULL)
		return; /* the pin then lasts until the coordinator exits */
	pthread_mutex_lock(&mu);
	*p = (struct hpin){node, rq, h->gen, h->size, h->slot, time(NULL) + PIN_DEADLINE_S, pins};
	pins = p;
	pthread_mutex_unlock(&mu);
}

/* Read the cold candidates in one batch and add those that arrived. */
static uint32_t send_cold(struct req *r, struct cold *c, uint32_t n, char **m, size_t *len)
{
	int fds[PEER_PREFETCH_MAX], rc[PEER_PREFETCH_MAX];
	uint32_t slots[PEER_PREFETCH_MAX], sent = 0;
	uint64_t sizes[PEER_PREFETCH_MAX];
	for (uint32_t k = 0; k < n; k++) {
		fds[k] = c[k].fd;
		slots[k] = c[k].slot;
		sizes[k] = c[k].size;
	}
	loader_load_batch(fds, slots, sizes, rc, n);
	for (uint32_t k = 0; k < n; k++) {
		close(fds[k]);
		pthread_mutex_lock(&D.mu);
		uint64_t gen = dlshim_engine_load_done(D.eng, job, c[k].item, rc[k] == 0);
		pthread_cond_broadcast(&D.loaded);
		pthread_mutex_unlock(&D.mu);
		struct peer_fetch_r h = {.node = (uint32_t)peer_self(), .req = r->req, .index = c[k].index, .slot = c[k].slot,
					 .gen = gen, .size = c[k].size, .mtime_ns = c[k].mtime};
		if (gen && *len < PEER_MSG_MAX / 2 && add_record(m, len, &h) == 0) {
			remember_pin(r->node, r->req, &h);
			sent++;
		} else if (gen) {
			pthread_mutex_lock(&D.mu);
			dlshim_engine_release(D.eng, job, c[k].slot, gen, 0, 0);
			pthread_mutex_unlock(&D.mu);
		}
	}
	return sent;
}

static void serve(struct req *r)
{
	struct peer_fetch_r h = {.node = (uint32_t)peer_self(), .req = r->req};
	char *m = NULL;
	size_t len = 0;
	int cold = 0;
	int rc = load_pinned(r->paths[0], &h.slot, &h.gen, &h.size, &h.mtime_ns, &cold);
	if (rc == 0 && add_record(&m, &len, &h) < 0)
		rc = E2BIG;
	if (rc != 0) {
		/* The wanted file cannot be served: one record saying why. */
		free(m);
		m = malloc(sizeof(h));
		if (m == NULL)
			return; /* the requester times out */
		h = (struct peer_fetch_r){.node = (uint32_t)peer_self(), .status = rc, .req = r->req};
		memcpy(m, &h, sizeof(h));
		len = sizeof(h);
		pthread_mutex_lock(&mu);
		refused++;
		pthread_mutex_unlock(&mu);
		dlog(DLSHIM_LOG_INFO, "peers: cannot serve %s to node %d: %s", r->paths[0], r->node, strerror(rc));
		peer_send_fetch_r(r->node, m, len);
		return;
	}
	remember_pin(r->node, r->req, &h);
	/* Prefetch: the candidates already resident here, in the requester's
	 * order; and when the wanted file had to be read from disk, the absent
	 * ones too, read together in one batch (the home refills the part of
	 * the group the requester is about to read, as redox loads a chunk).
	 * Each candidate has its own free slot on the requester, so no two
	 * files can compete for one slot (the paper's conflict); a path named
	 * twice, or equal to the wanted one, is sent once. Whatever is sent
	 * is consumed by the requester's job (its unread files). */
	uint32_t sent = 0, ncold = 0;
	struct cold coldv[PEER_PREFETCH_MAX];
	for (int i = 1; i < r->npaths && len < PEER_MSG_MAX / 2; i++) {
		int dup = 0;
		for (int k = 0; k < i; k++)
			dup |= strcmp(r->paths[k], r->paths[i]) == 0;
		struct peer_fetch_r c = {.node = (uint32_t)peer_self(), .req = r->req, .index = (uint32_t)i};
		if (dup)
			continue;
		int crc = candidate_pinned(r->paths[i], &c.slot, &c.gen, &c.size, &c.mtime_ns,
					   cold && ncold < PEER_PREFETCH_MAX ? &coldv[ncold] : NULL);
		if (crc == EINPROGRESS) {
			coldv[ncold++].index = (uint32_t)i;
		} else if (crc == 0 && add_record(&m, &len, &c) == 0) {
			remember_pin(r->node, r->req, &c);
			sent++;
		}
	}
	uint32_t sent_cold = ncold ? send_cold(r, coldv, ncold, &m, &len) : 0;
	pthread_mutex_lock(&mu);
	prefetch_sent += sent + sent_cold;
	prefetch_loaded += sent_cold;
	pthread_mutex_unlock(&mu);
	peer_send_fetch_r(r->node, m, len);
}

static void *home_thread(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&mu);
		while (head == NULL)
			pthread_cond_wait(&cv, &mu);
		struct req *r = head;
		head = r->next;
		if (head == NULL)
			tail = NULL;
		pthread_mutex_unlock(&mu);
		serve(r);
		req_free(r);
	}
	return NULL;
}

int peer_home_start(void)
{
	pthread_mutex_lock(&D.mu);
	job = dlshim_engine_job_attach(D.eng, "peers");
	pthread_mutex_unlock(&D.mu);
	if (job < 0)
		return -1;
	for (int i = 0; i < HOME_THREADS; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, home_thread, NULL) != 0)
			return -1;
		pthread_detach(t);
	}
	return 0;
}

/* Unpin every pin matching: one request (done), one node (restarted) or
 * all expired ones (node_or_all -1). */
static void unpin(int node, uint64_t rq, int all_of_node, int expired, int count)
{
	time_t now = time(NULL);
	struct hpin *drop = NULL;
	pthread_mutex_lock(&mu);
	for (struct hpin **pp = &pins; *pp;) {
		struct hpin *p = *pp;
		int hit = expired ? now > p->deadline : p->node == node && (all_of_node || p->req == rq);
		if (hit) {
			*pp = p->next;
			p->next = drop;
			drop = p;
			if (count) {
				served++;
				served_bytes += p->size;
			}
		} else {
			pp = &p->next;
		}
	}
	pthread_mutex_unlock(&mu);
	if (drop == NULL)
		return;
	pthread_mutex_lock(&D.mu);
	for (struct hpin *p = drop, *nx; p; p = nx) {
		nx = p->next;
		dlshim_engine_release(D.eng, job, p->slot, p->gen, count ? p->size : 0, 0);
		free(p);
	}
	pthread_mutex_unlock(&D.mu);
}

void peer_home_done(int node, uint64_t rq, uint32_t slot, uint64_t gen)
{
	(void)slot;
	(void)gen;
	unpin(node, rq, 0, 0, 1);
}

void peer_home_expire(int node_or_all)
{
	if (node_or_all < 0)
		unpin(-1, 0, 0, 1, 0);
	else
		unpin(node_or_all, 0, 1, 0, 0);
}

size_t peer_home_json(char *buf, size_t cap)
{
	pthread_mutex_lock(&mu);
	int n = snprintf(buf, cap,
			 "\"served\":{\"files\":%llu,\"bytes\":%llu,\"refused\":%llu,\"prefetched\":%llu,"
			 "\"prefetched_from_disk\":%llu}",
			 (unsigned long long)served, (unsigned long long)served_bytes, (unsigned long long)refused,
			 (unsigned long long)prefetch_sent, (unsigned long long)prefetch_loaded);
	pthread_mutex_unlock(&mu);
	return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
