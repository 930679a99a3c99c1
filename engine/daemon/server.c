/* One thread per client connection: decode a request, ask the engine under
 * the daemon mutex, reply. Anything malformed drops that client only. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "dlshim/packet.h"
#include "dlshim/proto.h"
#include "dlshim/fileid.h"
#include "dlshim/scan.h"
#include "dlshim/shm.h"
#include "h5rows.h"
#include "peer_module.h"

/* Prefetch candidates per remote request, whatever DLSHIM_PREFETCH says
 * (the wire format allows 32). */
#define PEER_PREFETCH_LIMIT 32

struct conn {
	int fd;
	struct session *s;  /* NULL for control connections (CLI) */
	int control;
	uint32_t seq;
	struct h5rows_conn h5;  /* its lease of decided HDF5 rows, if any */
};

static int reply(struct conn *c, uint16_t type, const void *p, uint32_t len, int pass_fd)
{
	static __thread char buf[DLSHIM_MSG_MAX + sizeof(struct dlshim_msg_hdr)];
	if (len > DLSHIM_MSG_MAX)
		return -1;
	size_t n = dlshim_msg_encode(buf, type, c->seq, p, len);
	return dlshim_send_packet(c->fd, buf, n, pass_fd);
}

/* Receive one request. Returns the payload length, -1 on EOF/error, -2 on
 * a malformed packet. `buf` must be 8-byte aligned. */
static long receive(struct conn *c, void *buf, size_t cap, struct dlshim_msg_hdr *h, int *rfd)
{
	static __thread char raw[sizeof(struct dlshim_msg_hdr) + DLSHIM_MSG_MAX];
	int fds[DLSHIM_PACKET_MAX_FDS], nfds, trunc;
	ssize_t n = dlshim_recv_packet(c->fd, raw, sizeof(raw), fds, &nfds, &trunc);
	*rfd = nfds > 0 ? fds[0] : -1;
	for (int i = 1; i < nfds; i++)
		close(fds[i]); /* more descriptors than any request carries */
	if (n <= 0) {
		if (*rfd >= 0)
			close(*rfd);
		*rfd = -1;
		return -1;
	}
	const void *payload;
	const char *why = "truncated";
	if (trunc || dlshim_msg_decode(raw, (size_t)n, h, &payload, &why) || h->len > cap) {
		dlog(DLSHIM_LOG_WARN, "dropping client fd %d: malformed message (%s)", c->fd, why);
		if (*rfd >= 0)
			close(*rfd);
		*rfd = -1;
		return -2;
	}
	c->seq = h->seq;
	memcpy(buf, payload, h->len);
	return h->len;
}

static void session_add_pin(struct session *s, uint32_t slot, uint64_t gen)
{
	if (s->npins == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		struct pin *p = realloc(s->pins, cap * sizeof(*p));
		if (p == NULL)
			return; /* the pin then lives until the coordinator exits */
		s->pins = p;
		s->cap = cap;
	}
	s->pins[s->npins++] = (struct pin){slot, gen};
}

static int session_drop_pin(struct session *s, uint32_t slot, uint64_t gen)
{
	for (size_t i = s->npins; i-- > 0;)
		if (s->pins[i].slot == slot && s->pins[i].gen == gen) {
			s->pins[i] = s->pins[--s->npins];
			return 0;
		}
	return -1;
}

static int handle_hello(struct conn *c, const struct dlshim_msg_hello *h)
{
	struct dlshim_msg_hello_ok ok = {.daemon_pid = (uint32_t)getpid(), .segment_id = D.segment_id,
					 .shm_len = D.shm_len, .flags = D.memcg_limit ? DLSHIM_HELLO_OK_F_MEMCAP : 0};
	pthread_mutex_lock(&D.mu);
	if (h->kind == DLSHIM_HELLO_CONTROL) {
		c->control = 1;
	} else {
		struct session *s;
		HASH_FIND(hh, D.sessions, &h->session, sizeof(h->session), s);
		if (s == NULL) {
			int job = dlshim_engine_job_attach(D.eng, h->job);
			if (job < 0) {
				pthread_mutex_unlock(&D.mu);
				dlog(DLSHIM_LOG_WARN, "job table full: refusing pid %u", h->pid);
				return -1;
			}
			s = calloc(1, sizeof(*s));
			if (s == NULL) {
				dlshim_engine_job_detach(D.eng, job);
				pthread_mutex_unlock(&D.mu);
				return -1;
			}
			s->id = h->session;
			s->pid = h->pid;
			s->job = job;
			if (h->job_owner)
				D.job_owner[job] = (pid_t)h->job_owner;
			if (h->flags & DLSHIM_HELLO_F_SPANS)
				D.job_spans[job] = 1;
			HASH_ADD(hh, D.sessions, id, sizeof(s->id), s);
			dlog(DLSHIM_LOG_INFO, "session %016llx pid %u joins job %s", (unsigned long long)s->id,
			     h->pid, h->job);
		}
		s->conns++;
		c->s = s;
		D.nclients++;
	}
	pthread_mutex_unlock(&D.mu);
	return reply(c, DLSHIM_MSG_HELLO_OK, &ok, sizeof(ok), D.shm_fd);
}

/* Load a missed file from the descriptor the client passed, after checking
 * it is the very file version the engine allocated for. */
static int load_from(int fd, const struct dlshim_msg_open *o, uint32_t slot)
{
	struct stat st;
	struct dlshim_file_id want = {o->dev, o->ino, o->size, o->mtime_ns, o->ctime_ns};
	if (fstat(fd, &st) < 0 || !dlshim_stat_is_version(&st, &want))
		return -1;
	return loader_load_now(fd, slot, o->size);
}

/* Open a catalog file by path for loading or for handing to a client,
 * checking it is still the file version the catalog knows: the path may
 * have been renamed over, rewritten, or replaced by a FIFO or device since
 * the scan (O_NONBLOCK: opening a FIFO must not block this thread). A
 * changed file is dropped from the cache and its new version remembered. */
static int open_item(uint32_t item, const char *path)
{
	if (path == NULL)
		return -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -1;
	struct stat st;
	struct dlshim_file_id want;
	pthread_mutex_lock(&D.mu);
	int known = dlshim_engine_item_id(D.eng, item, &want) == 0;
	pthread_mutex_unlock(&D.mu);
	if (!known || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_dev != want.dev ||
	    (uint64_t)st.st_ino != want.ino) {
		dlog(DLSHIM_LOG_DEBUG, "%s is no longer the file scanned; not used", path);
		close(fd);
		return -1;
	}
	if (!dlshim_stat_is_version(&st, &want)) {
		struct dlshim_file_id now = dlshim_stat_version(&st);
		pthread_mutex_lock(&D.mu);
		dlshim_engine_item_changed(D.eng, item, &now);
		pthread_mutex_unlock(&D.mu);
		dlog(DLSHIM_LOG_DEBUG, "%s changed since it was cached or scanned; dropped", path);
		close(fd);
		return -1;
	}
	/* The client gets this descriptor as its own: no O_NONBLOCK left on it. */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
}

/* Is the item a file that only a peer holds? Called with D.mu. */
static int item_is_remote(uint32_t item)
{
	struct dlshim_file_id id;
	return dlshim_engine_item_id(D.eng, item, &id) == 0 && id.dev == PEER_REMOTE_DEV;
}

/* Prefetch candidates: remote files held by the wanted file's home. */
struct same_home {
	uint64_t holders;
};

static int on_same_home(void *ctx, uint32_t item)
{
	const struct same_home *h = ctx;
	struct dlshim_file_id id;
	uint64_t size, holders;
	int64_t mtime;
	const char *p = dlshim_engine_item_path(D.eng, item);
	return dlshim_engine_item_id(D.eng, item, &id) == 0 && id.dev == PEER_REMOTE_DEV && p &&
	       peer_module_lookup(p, &size, &mtime, &holders) == 0 && (holders & h->holders);
}

/* Describe one remote item's slot for the fetch (iovecs from `iov`). */
static int fetch_item(uint32_t item, uint32_t slot, struct iovec *iov, size_t room, struct peer_item *out)
{
	struct dlshim_file_id id;
	pthread_mutex_lock(&D.mu);
	const char *p = dlshim_engine_item_path(D.eng, item);
	int known = dlshim_engine_item_id(D.eng, item, &id) == 0;
	pthread_mutex_unlock(&D.mu);
	if (!known || p == NULL)
		return -1;
	int ni = 0;
	for (uint64_t off = 0; off < id.size;) {
		int got = dlshim_engine_slot_iov(D.eng, slot, off, iov + ni, (int)room - ni);
		if (got <= 0)
			return -1;
		for (int j = ni; j < ni + got; j++)
			off += iov[j].iov_len;
		ni += got;
	}
	*out = (struct peer_item){.path = p, .size = id.size, .mtime_ns = id.mtime_ns, .iov = iov, .niov = ni, .item = item};
	return 0;
}

/* The remote files of a chunk load: only the one served now is fetched,
 * on demand (the redox rule: what crosses the network is consumed). With
 * DLSHIM_PREFETCH=K, up to K upcoming files of the job on the same home go
 * along as candidates (first the chunk's, then other unread files of the
 * group, each given a slot now), and the home sends those resident in its
 * cache. Everything not received is given back unloaded (rc stays -1) and
 * fetched when a request needs it. */
static void load_remote(struct conn *c, const struct dlshim_open_result *res, uint32_t served, const char *remote,
			int *rc)
{
	uint32_t n = res->nload, want = UINT32_MAX;
	for (uint32_t i = 0; i < n; i++)
		if (remote[i] && res->load_item[i] == served)
			want = i;
	if (want == UINT32_MAX)
		return;
	int k = peer_module_prefetch();
	if (k > PEER_PREFETCH_LIMIT)
		k = PEER_PREFETCH_LIMIT;
	/* Entries: [0] wanted, then chunk members, then group members. */
	uint32_t cap = 1 + (uint32_t)k;
	struct peer_item *it = calloc(cap, sizeof(*it));
	uint32_t *idx = calloc(cap, sizeof(*idx)), *xitem = calloc(cap, sizeof(*xitem)), *xslot = calloc(cap, sizeof(*xslot));
	size_t niov = 0, used = 0;
	pthread_mutex_lock(&D.mu);
	for (uint32_t i = 0; i < n; i++)
		niov += (size_t)(dlshim_engine_item_size(D.eng, res->load_item[i]) / DLSHIM_BLOCK_SIZE) + 2;
	uint64_t wsize, wholders = 0;
	int64_t wmt;
	const char *wp = dlshim_engine_item_path(D.eng, served);
	struct same_home home = {0};
	if (wp && peer_module_lookup(wp, &wsize, &wmt, &wholders) == 0)
		home.holders = wholders;
	pthread_mutex_unlock(&D.mu);
	/* Room for the group members' blocks: at most an eighth of the cache. */
	niov += (size_t)k * 2 + D.shm_len / 8 / DLSHIM_BLOCK_SIZE;
	struct iovec *iov = calloc(niov, sizeof(*iov));
	uint32_t m = 0, nx = 0;
	if (it && idx && xitem && xslot && iov && fetch_item(served, res->load_slot[want], iov, niov, &it[0]) == 0) {
		used += (size_t)it[0].niov;
		idx[m++] = want;
		for (uint32_t i = 0; i < n && m < cap; i++) {
			pthread_mutex_lock(&D.mu);
			int same = i != want && remote[i] && on_same_home(&home, res->load_item[i]);
			pthread_mutex_unlock(&D.mu);
			if (same && fetch_item(res->load_item[i], res->load_slot[i], iov + used, niov - used, &it[m]) == 0) {
				used += (size_t)it[m].niov;
				idx[m++] = i;
			}
		}
		if (m < cap) {
			pthread_mutex_lock(&D.mu);
			nx = dlshim_engine_group_absent(D.eng, c->s->job, served, on_same_home, &home, xitem, xslot, cap - m);
			pthread_mutex_unlock(&D.mu);
			for (uint32_t x = 0; x < nx; x++) {
				idx[m] = UINT32_MAX - x;
				if (fetch_item(xitem[x], xslot[x], iov + used, niov - used, &it[m]) == 0)
					used += (size_t)it[m++].niov;
			}
		}
		char why[300];
		if (peer_module_fetch(c->s, it, (int)m, why, sizeof(why)) < 0)
			dlog(DLSHIM_LOG_WARN, "peers: %s is not on this node and cannot be fetched: %s", it[0].path, why);
		for (uint32_t j = 0; j < m; j++)
			if (idx[j] < n)
				rc[idx[j]] = it[j].got ? 0 : -1;
	}
	/* The group members taken for prefetch: publish what arrived (no
	 * client holds them yet), give back the rest. */
	pthread_mutex_lock(&D.mu);
	for (uint32_t x = 0; x < nx; x++) {
		int got = 0;
		for (uint32_t j = 0; j < m; j++)
			got |= idx[j] == UINT32_MAX - x && it[j].got;
		uint64_t gen = dlshim_engine_load_done(D.eng, c->s->job, xitem[x], got);
		if (gen)
			dlshim_engine_release(D.eng, c->s->job, xslot[x], gen, 0, 0);
	}
	if (nx)
		pthread_cond_broadcast(&D.loaded);
	pthread_mutex_unlock(&D.mu);
	free(it);
	free(idx);
	free(xitem);
	free(xslot);
	free(iov);
}

/* Load a chunk's files in one batch. Each was pinned for the loader; the
 * served one keeps its pin for the client, the others are released. */
static uint64_t load_chunk(struct conn *c, const struct dlshim_open_result *res, uint32_t served)
{
	uint32_t n = res->nload;
	int fds[DLSHIM_MAX_CHUNK], rc[DLSHIM_MAX_CHUNK];
	uint64_t sizes[DLSHIM_MAX_CHUNK];
	const char *paths[DLSHIM_MAX_CHUNK];
	char remote[DLSHIM_MAX_CHUNK];
	pthread_mutex_lock(&D.mu);
	for (uint32_t i = 0; i < n; i++) {
		paths[i] = dlshim_engine_item_path(D.eng, res->load_item[i]);
		sizes[i] = dlshim_engine_item_size(D.eng, res->load_item[i]);
		remote[i] = item_is_remote(res->load_item[i]);
	}
	pthread_mutex_unlock(&D.mu);
	for (uint32_t i = 0; i < n; i++)
		fds[i] = remote[i] ? -1 : open_item(res->load_item[i], paths[i]);
	loader_load_batch(fds, res->load_slot, sizes, rc, n);
	load_remote(c, res, served, remote, rc);
	for (uint32_t i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	uint64_t served_gen = 0;
	pthread_mutex_lock(&D.mu);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t it = res->load_item[i];
		uint64_t gen = dlshim_engine_load_done(D.eng, c->s->job, it, rc[i] == 0);
		if (gen && it == served) {
			served_gen = gen;
			session_add_pin(c->s, res->load_slot[i], gen);
		} else if (gen) {
			dlshim_engine_release(D.eng, c->s->job, res->load_slot[i], gen, 0, 0);
		}
	}
	pthread_cond_broadcast(&D.loaded);
	pthread_mutex_unlock(&D.mu);
	return served_gen;
}

static void rescan(int job);

/* The next chunk of a group, loaded while the current one is consumed. */
static void start_ahead(struct conn *c, const struct dlshim_open_result *res)
{
	int fds[DLSHIM_MAX_CHUNK];
	const char *paths[DLSHIM_MAX_CHUNK];
	char remote[DLSHIM_MAX_CHUNK];
	pthread_mutex_lock(&D.mu);
	for (uint32_t i = 0; i < res->nload; i++) {
		paths[i] = dlshim_engine_item_path(D.eng, res->load_item[i]);
		remote[i] = item_is_remote(res->load_item[i]);
	}
	pthread_mutex_unlock(&D.mu);
	/* Remote files are never loaded ahead of demand (nothing is sent over
	 * the network that is not consumed): the loader gives them back. */
	for (uint32_t i = 0; i < res->nload; i++)
		fds[i] = remote[i] ? -1 : open_item(res->load_item[i], paths[i]);
	loader_load_ahead(c->s->job, res, fds);
}

/* A descriptor of the file served: the file itself, or for a file only a
 * peer holds, a memfd copy of its slot. */
static int served_fd(uint32_t item, const char *path, uint32_t slot, uint64_t gen, int hit)
{
	struct dlshim_file_id id;
	pthread_mutex_lock(&D.mu);
	int remote = dlshim_engine_item_id(D.eng, item, &id) == 0 && id.dev == PEER_REMOTE_DEV;
	pthread_mutex_unlock(&D.mu);
	if (!remote)
		return open_item(item, path);
	return hit ? slot_memfd(slot, gen, id.size, id.mtime_ns) : -1;
}

/* `remote`: the request names a file only a peer holds (OPEN_PATH in a
 * redirect mode); it has no descriptor and always needs one back. */
void daemon_engine_open(int job, const struct dlshim_file_id *id, unsigned flags, struct dlshim_open_result *res)
{
	for (;;) {
		dlshim_engine_open(D.eng, job, id, flags, res);
		if (res->kind != DLSHIM_OPEN_WAIT)
			return;
		flags |= DLSHIM_OPEN_F_RETRY;
		/* A loader that never finishes (a stalled client holding a
		 * NEED_FD) must not hold everyone else: give up after a while. */
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 5;
		if (pthread_cond_timedwait(&D.loaded, &D.mu, &dl) == ETIMEDOUT) {
			/* Decide without waiting, so that in redirect modes the
			 * file the client reads is the one recorded as served. */
			dlshim_engine_open(D.eng, job, id, flags | DLSHIM_OPEN_F_NOWAIT, res);
			return;
		}
	}
}

/* Attempts at serving one redirected request (see handle_open): up to
 * REDECIDE_MAX that fail slowly (a load or fetch that timed out), and any
 * number, up to REDECIDE_CAP, that fail fast (a home known to be dead fails
 * at once, and a group may hold more of its files than REDECIDE_MAX). */
#define REDECIDE_MAX 8
#define REDECIDE_FAST_NS 50000000LL
#define REDECIDE_CAP 4096
/* Claims another node of a spanning job had taken, for one request: each
 * refusal leaves one file fewer unconsumed in the group epoch, so this is
 * only a guard against a misbehaving authority. */
#define REFUSALS_MAX 4096

/* Path hash -> item of every declared file (multi-node only), for the
 * files a claim's answer says other nodes took. Guarded by D.mu. */
struct path_item {
	uint64_t hash;
	uint32_t item;
	UT_hash_handle hh;
};
static struct path_item *path_items;

static void path_item_note(const char *path, uint32_t item)
{
	uint64_t h = peer_path_hash(path);
	struct path_item *p;
	HASH_FIND(hh, path_items, &h, sizeof(h), p);
	if (p == NULL && (p = calloc(1, sizeof(*p))) != NULL) {
		p->hash = h;
		HASH_ADD(hh, path_items, hash, sizeof(p->hash), p);
	}
	if (p)
		p->item = item;
}

/* A job whose ranks run on several nodes: may this node serve the file
 * just decided, or is a re-open's decision still of the group's current
 * epoch? The group's claim authority knows (peers/peer_claims.c). Returns
 * 1 when the request must be decided again: another node of the job
 * consumed the file in this group epoch, or the group moved on since the
 * decision (this node's view of it lags: its other files went to other
 * nodes). The engine learns the epoch the authority named. An authority
 * that cannot be asked leaves the file served unverified. */
static int claim_denied(int job, const struct dlshim_open_result *res)
{
	if ((!res->decided && !res->repeat) || !D.job_spans[job] || res->item == UINT32_MAX)
		return 0;
	char name[DLSHIM_JOB_MAX], path[DLSHIM_PATH_MAX], group[DLSHIM_PATH_MAX + 64];
	const char *gk;
	uint32_t size;
	pthread_mutex_lock(&D.mu);
	const char *p = dlshim_engine_item_path(D.eng, res->item);
	int known = p && dlshim_engine_item_group(D.eng, job, res->item, &gk, &size) == 0;
	if (known) {
		snprintf(path, sizeof(path), "%s", p);
		snprintf(group, sizeof(group), "%s", gk);
		snprintf(name, sizeof(name), "%s", dlshim_engine_job_name(D.eng, job));
	}
	pthread_mutex_unlock(&D.mu);
	uint32_t at, nsync;
	uint64_t sync[PEER_MODULE_SYNC_MAX];
	int g = known ? peer_module_claim(name, group, size, res->decided ? path : NULL, res->gepoch, &at, sync, &nsync)
		      : -1;
	if (g < 0)
		return 0;
	pthread_mutex_lock(&D.mu);
	/* Granted in a later epoch (this node was behind) or refused: either
	 * way the file is consumed in epoch `at`. A re-open of a past epoch:
	 * only the epoch is news. */
	if (g == 0 || at != res->gepoch)
		dlshim_engine_group_catch_up(D.eng, job, res->item, at, res->decided);
	/* What the other nodes took meanwhile: this node's next decisions
	 * avoid it instead of learning it one refusal at a time. */
	for (uint32_t k = 0; k < nsync; k++) {
		struct path_item *pi;
		HASH_FIND(hh, path_items, &sync[k], sizeof(sync[k]), pi);
		if (pi)
			dlshim_engine_group_catch_up(D.eng, job, pi->item, at, 1);
	}
	D.claims_refused[job] += g == 0 && res->decided;
	pthread_mutex_unlock(&D.mu);
	return g == 0;
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* One more attempt after a failed one that began at *t (now the next
 * one's start)? */
static int another_attempt(int *attempts, int *slow, int64_t *t)
{
	int64_t now = now_ns();
	*slow += now - *t >= REDECIDE_FAST_NS;
	*t = now;
	return ++*attempts < REDECIDE_CAP && *slow < REDECIDE_MAX;
}

static int handle_open(struct conn *c, const struct dlshim_msg_open *o, int ofd, int remote)
{
	int64_t t_attempt = now_ns();
	int slow = 0;
	struct dlshim_file_id id = {o->dev, o->ino, o->size, o->mtime_ns, o->ctime_ns};
	static __thread struct dlshim_open_result res;
	struct dlshim_msg_open_r r;
	int sfd = -1;
	/* In redirect modes a served file that cannot be delivered is decided
	 * again (it stays consumed: it is unavailable), while attempts fail
	 * fast or a few slow ones at most (another_attempt): the client never
	 * reads a file the engine did not record as served while another
	 * attempt can still succeed. */
	for (int attempt = 0, tries = 0, refusals = 0;; tries++) {
		memset(&r, 0, sizeof(r));
		r.status = DLSHIM_OPEN_R_PASS;
		sfd = -1;
		pthread_mutex_lock(&D.mu);
		daemon_engine_open(c->s->job, &id, tries ? DLSHIM_OPEN_F_RETRY : 0, &res);
		if (res.kind == DLSHIM_OPEN_HIT)
			session_add_pin(c->s, res.slot, res.gen);
		const char *served_path = res.item != res.requested ? dlshim_engine_item_path(D.eng, res.item) : NULL;
		pthread_mutex_unlock(&D.mu);

		if (res.kind == DLSHIM_OPEN_LOAD && remote) {
			/* A remote file loaded alone (outside the job's groups). */
			struct dlshim_open_result *one = malloc(sizeof(*one));
			uint64_t gen = 0;
			if (one) {
				*one = (struct dlshim_open_result){.kind = DLSHIM_OPEN_LOAD_CHUNK, .item = res.item, .nload = 1};
				one->load_item[0] = res.item;
				one->load_slot[0] = res.slot;
				gen = load_chunk(c, one, res.item);
				free(one);
			} else {
				pthread_mutex_lock(&D.mu);
				dlshim_engine_load_done(D.eng, c->s->job, res.item, 0);
				pthread_cond_broadcast(&D.loaded);
				pthread_mutex_unlock(&D.mu);
			}
			res.kind = gen ? DLSHIM_OPEN_HIT : DLSHIM_OPEN_PASS;
			res.gen = gen;
		} else if (res.kind == DLSHIM_OPEN_LOAD) {
			/* The client's own descriptor: sent with the OPEN, or asked for. */
			int fd = ofd, ok = 1;
			ofd = -1;
			if (fd < 0) {
				r.status = DLSHIM_OPEN_R_NEED_FD;
				ok = reply(c, DLSHIM_MSG_OPEN_R, &r, sizeof(r), -1) == 0;
				struct dlshim_msg_hdr h;
				uint64_t tmp[8];
				/* A client that stops answering here would hold everyone
				 * waiting for this file: 5 s, then the load fails. */
				struct timeval tv = {5, 0}, none = {0, 0};
				setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
				if (ok)
					ok = receive(c, tmp, sizeof(tmp), &h, &fd) == 0 && h.type == DLSHIM_MSG_LOADFD && fd >= 0;
				setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
			}
			if (ok)
				ok = load_from(fd, o, res.slot) == 0;
			if (fd >= 0)
				close(fd);
			pthread_mutex_lock(&D.mu);
			uint64_t gen = dlshim_engine_load_done(D.eng, c->s->job, res.item, ok);
			if (gen) {
				session_add_pin(c->s, res.slot, gen);
				res.kind = DLSHIM_OPEN_HIT;
				res.gen = gen;
			} else {
				res.kind = DLSHIM_OPEN_PASS;
			}
			pthread_cond_broadcast(&D.loaded);
			pthread_mutex_unlock(&D.mu);
			r.status = DLSHIM_OPEN_R_PASS;
		}
		if (ofd >= 0)
			close(ofd);
		ofd = -1;
		if (res.nload > 0 && res.ahead) {
			/* handled after the reply */
		} else if (res.nload > 0) {
			uint64_t gen = load_chunk(c, &res, res.kind == DLSHIM_OPEN_LOAD_CHUNK ? res.item : UINT32_MAX);
			if (res.kind == DLSHIM_OPEN_LOAD_CHUNK) {
				res.kind = gen ? DLSHIM_OPEN_HIT : DLSHIM_OPEN_PASS;
				res.gen = gen;
				for (uint32_t i = 0; i < res.nload; i++)
					if (res.load_item[i] == res.item)
						res.slot = res.load_slot[i];
			}
		}
		if (res.kind == DLSHIM_OPEN_HIT) {
			r.status = DLSHIM_OPEN_R_HIT;
			r.item = res.item;
			r.slot = res.slot;
			r.gen = res.gen;
			r.size = res.size;
		}
		if (claim_denied(c->s->job, &res)) {
			/* Another node of the job has it this epoch: decide again. */
			pthread_mutex_lock(&D.mu);
			if (r.status == DLSHIM_OPEN_R_HIT && session_drop_pin(c->s, r.slot, r.gen) == 0)
				dlshim_engine_release(D.eng, c->s->job, r.slot, r.gen, 0, 0);
			int again = ++refusals < REFUSALS_MAX && res.requested != UINT32_MAX &&
				    dlshim_engine_forget_served(D.eng, c->s->job, res.requested);
			pthread_mutex_unlock(&D.mu);
			r.status = DLSHIM_OPEN_R_PASS;
			if (res.nload > 0 && res.ahead)
				start_ahead(c, &res);
			if (again)
				continue;
			res.nload = 0;
			break;
		}
		/* A redirected request gets a descriptor of the file actually served,
		 * so everything the shim does not intercept sees the same bytes. */
		if ((res.item != res.requested || remote) && res.item != UINT32_MAX) {
			sfd = served_fd(res.item, served_path ? served_path : "", r.slot, r.gen, r.status == DLSHIM_OPEN_R_HIT);
			if (sfd >= 0) {
				r.flags |= DLSHIM_OPEN_R_F_FD;
			} else {
				/* Cannot hand over the served file: give the pin back;
				 * decide again, or (exact mode, out of attempts) let the
				 * client read its own file. */
				int again = 0;
				pthread_mutex_lock(&D.mu);
				if (r.status == DLSHIM_OPEN_R_HIT && session_drop_pin(c->s, r.slot, r.gen) == 0)
					dlshim_engine_release(D.eng, c->s->job, r.slot, r.gen, 0, 0);
				if (another_attempt(&attempt, &slow, &t_attempt) && res.requested != UINT32_MAX)
					again = dlshim_engine_forget_served(D.eng, c->s->job, res.requested);
				pthread_mutex_unlock(&D.mu);
				r.status = DLSHIM_OPEN_R_PASS;
				if (again) {
					dlog(DLSHIM_LOG_DEBUG, "served file %u of request %u cannot be delivered; deciding again",
					     res.item, res.requested);
					if (res.nload > 0 && res.ahead)
						start_ahead(c, &res);
					continue;
				}
			}
		}
		break;
	}
	if (r.status == DLSHIM_OPEN_R_HIT)
		peer_module_note_served(r.item);
	int rc = reply(c, DLSHIM_MSG_OPEN_R, &r, sizeof(r), sfd);
	if (sfd >= 0)
		close(sfd);
	if (res.nload > 0 && res.ahead)
		start_ahead(c, &res);
	pthread_mutex_lock(&D.mu);
	int due = dlshim_engine_job_rescan_due(D.eng, c->s->job);
	pthread_mutex_unlock(&D.mu);
	if (due)
		rescan(c->s->job);
	return rc;
}

/* ---- dataset declaration ---- */

struct scanned {
	struct dlshim_file_id id;
	char *path;
	char *group;
};

struct scan_acc {
	struct scanned *v;
	size_t n, cap;
	enum dlshim_redirect mode;
	const char *roots;
};

static char *group_key(const char *path, const char *root, enum dlshim_redirect mode);

static void add_remote(struct scan_acc *a, const char *path, uint64_t size, int64_t mtime_ns, const char *root);

static int scan_cb(void *ctx, const char *path, const struct stat *st, const char *root)
{
	struct scan_acc *a = ctx;
	if (st == NULL) {
		/* A listed file that is not here: in a redirect mode a peer's
		 * file joins the dataset, as the roots' remote files do. */
		uint64_t size, holders;
		int64_t mtime;
		if (a->mode != DLSHIM_REDIRECT_OFF && dlshim_config_path_routed(&D.cfg, path, strlen(path)) &&
		    peer_module_lookup(path, &size, &mtime, &holders) == 0)
			add_remote(a, path, size, mtime, root);
		return 0;
	}
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 1024;
		struct scanned *v = realloc(a->v, cap * sizeof(*v));
		if (v == NULL)
			return 1;
		a->v = v;
		a->cap = cap;
	}
	struct scanned *s = &a->v[a->n];
	s->id = dlshim_stat_version(st);
	s->path = strdup(path);
	s->group = group_key(path, root, a->mode);
	if (s->path == NULL)
		return 1;
	a->n++;
	return 0;
}

/* The label group of a file. */
static char *group_key(const char *path, const char *root, enum dlshim_redirect mode)
{
	char *group = NULL;
	/* A label group holds files of one directory (dir) or root (any) and
	 * one extension: a stray README.txt never stands in for an image, and
	 * a group's epoch is not held open by files the program never asks
	 * for. */
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	const char *dot = strrchr(base, '.');
	const char *ext = (dot && dot != base) ? dot : "";
	/* Keys start with the kind ("d:" directory groups for dir jobs, "r:"
	 * root groups for any and exact jobs): the same file belongs to one
	 * group of each kind, and a root that is itself a class directory must
	 * not make the two kinds share a group. */
	const char *kind = mode == DLSHIM_REDIRECT_DIR ? "d:" : "r:";
	if (base[0] == '.') {
		/* A hidden file is a group of its own: never a stand-in, never
		 * redirected, but still read once per epoch. */
		if (asprintf(&group, "%s%s|hidden", kind, path) < 0)
			group = NULL;
	} else {
		/* Exact mode groups like any: only for per-group epoch counting. */
		int dl = mode == DLSHIM_REDIRECT_DIR ? (int)(slash ? slash - path : 0) : (int)strlen(root);
		if (asprintf(&group, "%s%.*s|%s", kind, dl, mode == DLSHIM_REDIRECT_DIR ? path : root, ext) < 0)
			group = NULL;
		for (char *q = group ? strrchr(group, '|') : NULL; q && *q; q++)
			*q = (char)((*q >= 'A' && *q <= 'Z') ? *q + 32 : *q); /* extensions compare case-blind */
	}
	return group;
}

/* A file some peer is home for and absent here joins the job's dataset
 * (and its label group, `root` being its root or the file list) under its
 * synthetic identity. */
static void add_remote(struct scan_acc *a, const char *path, uint64_t size, int64_t mtime_ns, const char *root)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 1024;
		struct scanned *v = realloc(a->v, cap * sizeof(*v));
		if (v == NULL)
			return;
		a->v = v;
		a->cap = cap;
	}
	struct scanned *s = &a->v[a->n];
	s->id = (struct dlshim_file_id){PEER_REMOTE_DEV, peer_path_hash(path), size, mtime_ns, 0};
	s->path = strdup(path);
	s->group = group_key(path, root, a->mode);
	if (s->path)
		a->n++;
	else
		free(s->group);
}

/* Every remote file under one of the job's roots. */
static void remote_cb(void *ctx, const char *path, uint64_t size, int64_t mtime_ns)
{
	struct scan_acc *a = ctx;
	size_t pl = strlen(path);
	const char *root = NULL;
	char rootbuf[DLSHIM_PATH_MAX];
	for (const char *r = a->roots; r && *r && root == NULL;) {
		size_t rl = strcspn(r, ",");
		while (rl > 1 && r[rl - 1] == '/')
			rl--;
		if (rl < sizeof(rootbuf) && rl < pl && memcmp(r, path, rl) == 0 && path[rl] == '/') {
			memcpy(rootbuf, r, rl);
			rootbuf[rl] = 0;
			root = rootbuf;
		}
		r += strcspn(r, ",");
		r += *r == ',';
	}
	struct stat st;
	if (root != NULL && lstat(path, &st) != 0)
		add_remote(a, path, size, mtime_ns, root);
}

/* Scan (without the lock: other clients keep being served) and declare
 * the files to the engine. Returns the number of files or -1. */
static long declare_files(int job, const char *roots, const char *list, enum dlshim_redirect mode,
			  uint32_t chunk, char *err, size_t errlen)
{
	struct scan_acc a = {.mode = mode, .roots = roots};
	long n = dlshim_scan(roots, list, scan_cb, &a, err, errlen);
	/* Redirect modes: the dataset is the cluster's files under the roots
	 * (with a file list, the listed ones: scan_cb adds those only a peer
	 * has). */
	if (n >= 0 && mode != DLSHIM_REDIRECT_OFF && (list == NULL || list[0] == 0) && peer_module_enabled()) {
		size_t before = a.n;
		peer_module_remote_files(remote_cb, &a);
		n += (long)(a.n - before);
	}
	int peers = peer_module_enabled();
	pthread_mutex_lock(&D.mu);
	for (size_t i = 0; i < a.n; i++) {
		uint32_t it = dlshim_engine_job_add_file(D.eng, job, &a.v[i].id, a.v[i].path, a.v[i].group);
		if (peers && it != UINT32_MAX)
			path_item_note(a.v[i].path, it);
	}
	dlshim_engine_job_dataset_done(D.eng, job, mode, chunk);
	pthread_mutex_unlock(&D.mu);
	for (size_t i = 0; i < a.n; i++) {
		free(a.v[i].path);
		free(a.v[i].group);
	}
	free(a.v);
	return n;
}

/* A job started a new epoch: files added since its last scan join now. */
static void rescan(int job)
{
	pthread_mutex_lock(&D.mu);
	struct job_spec sp = D.spec[job];
	char *roots = sp.roots ? strdup(sp.roots) : NULL, *list = sp.list ? strdup(sp.list) : NULL;
	pthread_mutex_unlock(&D.mu);
	char err[256];
	if (roots && list) {
		long n = declare_files(job, roots, list, (enum dlshim_redirect)sp.redirect, sp.chunk, err, sizeof(err));
		dlog(DLSHIM_LOG_DEBUG, "rescanned job %d: %ld files", job, n);
	}
	free(roots);
	free(list);
}

static int handle_dataset(struct conn *c, const void *payload, long len)
{
	struct dlshim_msg_dataset d;
	char msg[256];
	if ((size_t)len < sizeof(d) + 2) {
		dlog(DLSHIM_LOG_WARN, "dropping client: short dataset message");
		return -1;
	}
	memcpy(&d, payload, sizeof(d));
	const char *roots = (const char *)payload + sizeof(d);
	size_t rl = strnlen(roots, (size_t)len - sizeof(d));
	if (sizeof(d) + rl + 1 >= (size_t)len || d.redirect > DLSHIM_REDIRECT_ANY) {
		dlog(DLSHIM_LOG_WARN, "dropping client: malformed dataset message");
		return -1;
	}
	const char *list = roots + rl + 1;
	if (strnlen(list, (size_t)len - sizeof(d) - rl - 1) == (size_t)len - sizeof(d) - rl - 1) {
		dlog(DLSHIM_LOG_WARN, "dropping client: unterminated file list in dataset message");
		return -1;
	}
	pthread_mutex_lock(&D.mu);
	int have = dlshim_engine_job_has_dataset(D.eng, c->s->job);
	pthread_mutex_unlock(&D.mu);
	if (have)
		return reply(c, DLSHIM_MSG_TEXT, "known", 5, -1);

	pthread_mutex_lock(&D.mu);
	struct job_spec *sp = &D.spec[c->s->job];
	free(sp->roots);
	free(sp->list);
	sp->roots = strdup(roots);
	sp->list = strdup(list);
	sp->redirect = d.redirect;
	sp->chunk = d.chunk;
	dlshim_engine_job_set_sampler(D.eng, c->s->job, (enum dlshim_sampler)d.sampler);
	pthread_mutex_unlock(&D.mu);
	char err[256] = "";
	long n = declare_files(c->s->job, roots, list, (enum dlshim_redirect)d.redirect, d.chunk, err, sizeof(err));
	struct dlshim_cache_stats cs;
	char name[DLSHIM_JOB_MAX + 1];
	pthread_mutex_lock(&D.mu);
	dlshim_engine_cache_stats(D.eng, &cs);
	snprintf(name, sizeof(name), "%s", dlshim_engine_job_name(D.eng, c->s->job)); /* the job table changes under D.mu */
	pthread_mutex_unlock(&D.mu);
	int m = n < 0 ? snprintf(msg, sizeof(msg), "error: %s", err)
		      : snprintf(msg, sizeof(msg), "files %ld redirect %s chunk %u", n,
				 dlshim_redirect_name((enum dlshim_redirect)d.redirect), cs.chunk_files);
	dlog(DLSHIM_LOG_INFO, "job %s dataset: %s", name, msg);
	return reply(c, DLSHIM_MSG_TEXT, msg, (uint32_t)m, -1);
}

/* A path this node does not have: maybe a peer is its home. */
static int handle_open_path(struct conn *c, const char *path, long len)
{
	struct dlshim_msg_open_r r;
	int sfd = -1;
	if (len < 2 || path[len - 1] != 0 || strlen(path) != (size_t)len - 1) {
		dlog(DLSHIM_LOG_WARN, "dropping client: malformed path in OPEN_PATH");
		return -1;
	}
	/* A redirect job's dataset spans the cluster: the engine decides which
	 * file of the group serves the request, as for a local path. */
	pthread_mutex_lock(&D.mu);
	int redirect = D.spec[c->s->job].redirect != DLSHIM_REDIRECT_OFF && dlshim_engine_job_has_dataset(D.eng, c->s->job);
	pthread_mutex_unlock(&D.mu);
	struct dlshim_msg_open o = {.dev = PEER_REMOTE_DEV, .ino = peer_path_hash(path)};
	uint64_t holders;
	if (redirect && peer_module_lookup(path, &o.size, &o.mtime_ns, &holders) == 0)
		return handle_open(c, &o, -1, 1);
	if (peer_module_remote_open(c->s, path, &r, &sfd) == 0) {
		pthread_mutex_lock(&D.mu);
		session_add_pin(c->s, r.slot, r.gen);
		pthread_mutex_unlock(&D.mu);
	}
	int rc = reply(c, DLSHIM_MSG_OPEN_R, &r, sizeof(r), sfd);
	if (sfd >= 0)
		close(sfd);
	return rc;
}

static void handle_release(struct conn *c, const struct dlshim_msg_release *m)
{
	pthread_mutex_lock(&D.mu);
	if (m->flags & DLSHIM_RELEASE_F_ROWS) {
		dlshim_engine_note_rows(D.eng, c->s->job, m->item, m->gen);
		dlshim_engine_release(D.eng, c->s->job, UINT32_MAX, 0, m->bytes_cache, 0);
	} else if (m->flags & DLSHIM_RELEASE_F_FAST) {
		/* A hit the client served through the shared index: no pin. */
		struct dlshim_file_id id = {m->dev, m->ino, m->size, m->mtime_ns, 0};
		dlshim_engine_fast_hit(D.eng, c->s->job, &id);
		dlshim_engine_release(D.eng, c->s->job, UINT32_MAX, 0, m->bytes_cache, m->bytes_pass);
	} else if (m->slot == UINT32_MAX || session_drop_pin(c->s, m->slot, m->gen) == 0) {
		dlshim_engine_release(D.eng, c->s->job, m->slot, m->gen, m->bytes_cache, m->bytes_pass);
	} else {
		dlog(DLSHIM_LOG_WARN, "pid %u released a pin it does not hold (slot %u)", c->s->pid, m->slot);
	}
	pthread_mutex_unlock(&D.mu);
}

/* Rows of an HDF5 dataset (h5rows.c decides and loads). */
static int handle_rows(struct conn *c, const void *payload)
{
	const struct dlshim_msg_rows *m = payload;
	const char *path = (const char *)payload + sizeof(*m); /* both names checked by the decoder */
	const char *dset = path + strlen(path) + 1;
	struct dlshim_msg_rows_r r;
	int pass_fd;
	h5rows_serve(c->s->job, m, path, dset, &r, &c->h5, &pass_fd);
	return reply(c, DLSHIM_MSG_ROWS_R, &r, sizeof(r), pass_fd);
}

static void conn_end(struct conn *c)
{
	h5rows_conn_end(&c->h5); /* before the job can end: its taken rows are recorded */
	pthread_mutex_lock(&D.mu);
	struct session *s = c->s;
	if (s) {
		D.nclients--;
		if (--s->conns == 0) {
			/* The process is gone (or closed every connection): whatever
			 * it still pinned goes back to the pool. */
			for (size_t i = 0; i < s->npins; i++)
				dlshim_engine_release(D.eng, s->job, s->pins[i].slot, s->pins[i].gen, 0, 0);
			if (s->npins)
				dlog(DLSHIM_LOG_INFO, "pid %u left with %zu pins; released", s->pid, s->npins);
			/* The job lingers a while: its next processes (a new
			 * epoch's DataLoader workers) continue its epoch. */
			dlshim_engine_job_release(D.eng, s->job);
			if (dlshim_engine_job_sessions(D.eng, s->job) == 0)
				D.job_idle_since[s->job] = time(NULL);
			HASH_DEL(D.sessions, s);
			free(s->pins);
			free(s);
		}
		if (D.nclients == 0)
			D.idle_since = time(NULL);
	}
	pthread_mutex_unlock(&D.mu);
	close(c->fd);
	free(c);
}

void *conn_thread(void *arg)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (c == NULL) {
		close((int)(intptr_t)arg);
		return NULL;
	}
	c->fd = (int)(intptr_t)arg;
	uint64_t buf[(DLSHIM_MSG_MAX / 8) + 1];
	struct dlshim_msg_hdr h;
	int fd;
	for (;;) {
		long n = receive(c, buf, sizeof(buf), &h, &fd);
		if (n < 0)
			break;
		int rc = 0;
		if (h.type == DLSHIM_MSG_HELLO && c->s == NULL && !c->control) {
			rc = handle_hello(c, (const struct dlshim_msg_hello *)buf);
		} else if (h.type == DLSHIM_MSG_OPEN && c->s) {
			rc = handle_open(c, (const struct dlshim_msg_open *)buf, fd, 0);
			fd = -1;
		} else if (h.type == DLSHIM_MSG_OPEN_PATH && c->s) {
			rc = handle_open_path(c, (const char *)buf, n);
		} else if (h.type == DLSHIM_MSG_DATASET && c->s) {
			rc = handle_dataset(c, buf, n);
		} else if (h.type == DLSHIM_MSG_ROWS && c->s) {
			rc = handle_rows(c, buf);
		} else if (h.type == DLSHIM_MSG_RELEASE && c->s) {
			handle_release(c, (const struct dlshim_msg_release *)buf);
		} else if (h.type == DLSHIM_MSG_STATS && (c->s || c->control)) {
			static __thread char txt[DLSHIM_MSG_MAX];
			pthread_mutex_lock(&D.mu);
			size_t len = stats_json(txt, sizeof(txt), c->s ? c->s->job : -1);
			pthread_mutex_unlock(&D.mu);
			rc = reply(c, DLSHIM_MSG_TEXT, txt, (uint32_t)len, -1);
		} else if (h.type == DLSHIM_MSG_STOP && c->control) {
			reply(c, DLSHIM_MSG_TEXT, "stopping", 8, -1);
			dlog(DLSHIM_LOG_INFO, "stop requested");
			D.stopping = 1;
			shutdown(D.listen_fd, SHUT_RDWR);
		} else {
			dlog(DLSHIM_LOG_WARN, "dropping client fd %d: unexpected message type %u", c->fd, h.type);
			rc = -1;
		}
		if (fd >= 0)
			close(fd); /* descriptors travel only with OPEN and LOADFD */
		if (rc < 0)
			break;
	}
	conn_end(c);
	return NULL;
}
