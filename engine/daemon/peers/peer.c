/* The transport between coordinators: one UCX context and worker driven by
 * a thread of its own, a listener on this node's DLSHIM_PEERS address, one
 * outgoing endpoint per peer (reconnected while it is down), control as
 * active messages and file bytes as RMA gets of the home's registered cache
 * segment. Only this thread touches UCX after start-up (single-threaded
 * worker); other threads hand it work through queues and wait on P.cv. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

#include "daemon.h"
#include "dlshim/shm.h"
#include "peer.h"
#include "peer_wire.h"

#define CONNECT_TIMEOUT_S 5  /* an endpoint that hears nothing back is retried */
#define FETCH_TIMEOUT_S 10   /* a home that does not answer a FETCH */
#define MAX_INCOMING 256

enum node_state { NODE_DOWN = 0, NODE_CONNECTING, NODE_UP };

struct node {
	struct peer_addr a;
	ucp_ep_h ep;
	int failed;             /* the endpoint reported an error: closed on the next turn */
	ucs_status_t fail_status;
	int heard;              /* its HELLO arrived: we know its segment and rkey */
	uint64_t incarnation;
	uint64_t base, data_off, nblocks;
	uint32_t block_size;
	void *rkey_buf;
	size_t rkey_len;
	ucp_rkey_h rkey;
	time_t next_try, connect_start;
	int logged_down;        /* its loss is in the log: do not repeat it every retry */
	enum node_state state;  /* read by stats under P.mu */
	char err[512];
	char transport[256];
	uint64_t fetches, bytes;
};

struct fetch {
	uint64_t req;
	int node;
	struct peer_item *it;   /* it[0] on demand, then the candidates sent */
	int n;
	int outstanding, issued, replied, done, rc;
	uint64_t bytes;         /* of the files whose gets were issued */
	time_t deadline;
	char why[512];
	struct fetch *next;
};

struct sendop {
	int node;
	unsigned id;
	void *msg;
	size_t len;
	struct sendop *next;
};

static struct {
	int on;
	char error[512];        /* why multi-node is off although configured */
	int n, self;
	struct node nodes[PEER_MAX_NODES];
	uint64_t incarnation;
	ucp_context_h ctx;
	ucp_worker_h w;
	ucp_listener_h lis;
	ucp_mem_h memh;
	void *my_rkey;
	size_t my_rkey_len;
	uint64_t data_off, nblocks;
	int efd, wake_fd;
	ucp_ep_h incoming[MAX_INCOMING];
	int incoming_failed[MAX_INCOMING];
	pthread_mutex_t mu;     /* queues, node status, counters, fetch completion */
	pthread_cond_t cv;
	struct fetch *newq, *inflight;
	struct sendop *sendq;
	uint64_t next_req;
	uint64_t remote_requests, remote_ok, remote_bytes, remote_failures, remote_local_hits;
	uint64_t prefetch_asked, prefetched, prefetch_hits;
	int prefetch_k;
	unsigned char *pf_items; /* engine item -> 1: arrived by prefetch, not served yet */
	size_t pf_cap;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .efd = -1, .wake_fd = -1};

int peer_enabled(void) { return P.on; }
int peer_self(void) { return P.self; }
int peer_nnodes(void) { return P.n; }

int peer_node_up(int i)
{
	pthread_mutex_lock(&P.mu);
	int up = i >= 0 && i < P.n && i != P.self && P.nodes[i].state == NODE_UP;
	pthread_mutex_unlock(&P.mu);
	return up;
}

static void wake(void)
{
	uint64_t one = 1;
	if (write(P.wake_fd, &one, sizeof(one)) < 0) {
		/* the counter is full: the thread is awake anyway */
	}
}

static void set_err(struct node *nd, const char *fmt, const char *detail)
{
	pthread_mutex_lock(&P.mu);
	snprintf(nd->err, sizeof(nd->err), fmt, detail);
	pthread_mutex_unlock(&P.mu);
}

/* ---- sending ---- */

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
	(void)status;
	free(user_data);
	ucp_request_free(request);
}

/* Send an active message to `node` over our endpoint; takes `msg`. */
static int send_am(int node, unsigned id, void *msg, size_t len)
{
	struct node *nd = &P.nodes[node];
	if (nd->ep == NULL || nd->failed) {
		free(msg);
		return -1;
	}
	ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
				   .cb.send = send_cb,
				   .user_data = msg};
	ucs_status_ptr_t r = ucp_am_send_nbx(nd->ep, id, NULL, 0, msg, len, &prm);
	if (r == NULL) {
		free(msg);
		return 0;
	}
	if (UCS_PTR_IS_ERR(r)) {
		free(msg);
		return -1;
	}
	return 0;
}

static void send_hello(int node, int want_reply)
{
	size_t len = sizeof(struct peer_hello) + P.my_rkey_len;
	char *m = malloc(len);
	if (m == NULL)
		return;
	struct peer_hello h = {.magic = PEER_MAGIC,
			       .version = PEER_VERSION,
			       .node = (uint32_t)P.self,
			       .nnodes = (uint32_t)P.n,
			       .incarnation = P.incarnation,
			       .base = (uint64_t)(uintptr_t)D.shm_base,
			       .data_off = P.data_off,
			       .nblocks = P.nblocks,
			       .block_size = DLSHIM_BLOCK_SIZE,
			       .want_reply = (uint32_t)want_reply,
			       .rkey_len = (uint32_t)P.my_rkey_len};
	memcpy(m, &h, sizeof(h));
	memcpy(m + sizeof(h), P.my_rkey, P.my_rkey_len);
	send_am(node, PEER_AM_HELLO, m, len);
}

static void files_out(void *ctx, void *msg, size_t len) { send_am((int)(intptr_t)ctx, PEER_AM_FILES, msg, len); }

/* Introduce ourselves: segment, rkey and our file list. */
static void introduce(int node, int want_reply)
{
	send_hello(node, want_reply);
	peer_catalog_encode_local((uint32_t)P.self, P.incarnation, files_out, (void *)(intptr_t)node);
}

void peer_send_fetch_r(int node, void *msg, size_t len) { peer_queue_send(node, PEER_AM_FETCH_R, msg, len); }

void peer_queue_send(int node, unsigned id, void *msg, size_t len)
{
	struct sendop *op = malloc(sizeof(*op));
	if (op == NULL) {
		free(msg);
		return;
	}
	*op = (struct sendop){node, id, msg, len, NULL};
	pthread_mutex_lock(&P.mu);
	op->next = P.sendq;
	P.sendq = op;
	pthread_mutex_unlock(&P.mu);
	wake();
}

/* ---- endpoints ---- */

static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)ep;
	struct node *nd = &P.nodes[(intptr_t)arg];
	nd->failed = 1;
	nd->fail_status = status;
}

static void in_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)ep;
	(void)status;
	P.incoming_failed[(intptr_t)arg] = 1;
}

static void conn_cb(ucp_conn_request_h req, void *arg)
{
	(void)arg;
	int i = 0;
	while (i < MAX_INCOMING && P.incoming[i])
		i++;
	if (i == MAX_INCOMING) {
		ucp_listener_reject(P.lis, req);
		return;
	}
	ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
					    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
			      .conn_request = req,
			      .err_mode = UCP_ERR_HANDLING_MODE_PEER,
			      .err_handler = {in_err_cb, (void *)(intptr_t)i}};
	if (ucp_ep_create(P.w, &ep, &P.incoming[i]) != UCS_OK)
		P.incoming[i] = NULL;
	P.incoming_failed[i] = 0;
}

static void ep_close(ucp_ep_h ep)
{
	ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
	ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &prm);
	if (r && !UCS_PTR_IS_ERR(r))
		ucp_request_free(r);
}

static int resolve(const struct peer_addr *a, int passive, struct sockaddr_storage *ss, socklen_t *sl, char *err,
		   size_t errlen)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0},
			*res;
	int rc = getaddrinfo(a->host, a->port, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "cannot resolve %s: %s", a->name, gai_strerror(rc));
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sl = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static void node_connect(int i)
{
	struct node *nd = &P.nodes[i];
	struct sockaddr_storage ss;
	socklen_t sl;
	char err[512];
	nd->next_try = time(NULL) + 1;
	if (resolve(&nd->a, 0, &ss, &sl, err, sizeof(err)) < 0) {
		set_err(nd, "%s", err);
		return;
	}
	ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
					    UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
			      .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
			      .sockaddr = {(struct sockaddr *)&ss, sl},
			      .err_mode = UCP_ERR_HANDLING_MODE_PEER,
			      .err_handler = {ep_err_cb, (void *)(intptr_t)i}};
	ucs_status_t st = ucp_ep_create(P.w, &ep, &nd->ep);
	if (st != UCS_OK) {
		nd->ep = NULL;
		set_err(nd, "cannot create an endpoint: %s", ucs_status_string(st));
		return;
	}
	nd->failed = 0;
	nd->heard = 0;
	nd->connect_start = time(NULL);
	pthread_mutex_lock(&P.mu);
	if (nd->state == NODE_DOWN && !nd->logged_down)
		nd->state = NODE_CONNECTING;
	pthread_mutex_unlock(&P.mu);
	introduce(i, 1);
}

/* Which transports UCX chose for the endpoint's lanes ("tcp/eth0",
 * "rc_mlx5/mlx5_0:1"), from its own description of the endpoint. */
static void describe_transport(struct node *nd)
{
	char *txt = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&txt, &len);
	if (f == NULL)
		return;
	ucp_ep_print_info(nd->ep, f);
	fclose(f);
	char out[256] = "";
	size_t ol = 0;
	for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
		char *lane = strstr(line, "lane[");
		if (lane == NULL)
			continue;
		/* "lane[0]:  1:tcp/eth0.0 md[1] ..." : the token with a slash. */
		for (char *tok = strtok_r(lane, " \t", &lane); tok; tok = strtok_r(NULL, " \t", &lane)) {
			char *sl = strchr(tok, '/');
			if (sl == NULL)
				continue;
			char *name = strchr(tok, ':');
			name = name && name < sl ? name + 1 : tok;
			size_t nl = strcspn(name, " \t");
			if (nl == 0 || memmem(out, ol, name, nl))
				break;
			if (ol + nl + 2 < sizeof(out)) {
				if (ol)
					out[ol++] = ',';
				memcpy(out + ol, name, nl);
				ol += nl;
				out[ol] = 0;
			}
			break;
		}
	}
	free(txt);
	pthread_mutex_lock(&P.mu);
	snprintf(nd->transport, sizeof(nd->transport), "%s", ol ? out : "unknown");
	pthread_mutex_unlock(&P.mu);
}

/* ---- fetches (requester side) ---- */

static void send_done(int node, uint64_t req)
{
	struct peer_done *d = malloc(sizeof(*d));
	if (d) {
		*d = (struct peer_done){(uint32_t)P.self, 0, req, 0};
		send_am(node, PEER_AM_DONE, d, sizeof(*d));
	}
}

static void fetch_complete(struct fetch *f, int rc)
{
	struct fetch **pp = &P.inflight;
	while (*pp && *pp != f)
		pp = &(*pp)->next;
	if (*pp)
		*pp = f->next;
	struct node *nd = &P.nodes[f->node];
	if (f->replied)
		send_done(f->node, f->req); /* unpin on the home whether or not the gets worked */
	pthread_mutex_lock(&P.mu);
	if (rc == 0) {
		nd->fetches++;
		nd->bytes += f->bytes;
	} else {
		for (int k = 0; k < f->n; k++)
			f->it[k].got = 0;
	}
	f->rc = rc;
	f->done = 1;
	pthread_cond_broadcast(&P.cv);
	pthread_mutex_unlock(&P.mu);
}

static void fetch_fail(struct fetch *f, const char *fmt, const char *detail)
{
	snprintf(f->why, sizeof(f->why), fmt, detail);
	f->rc = -1;
	if (f->outstanding == 0)
		fetch_complete(f, -1);
}

static void get_cb(void *request, ucs_status_t status, void *user_data)
{
	struct fetch *f = user_data;
	if (status != UCS_OK && f->rc == 0) {
		snprintf(f->why, sizeof(f->why), "RMA read from node %d (%s) failed: %s", f->node, P.nodes[f->node].a.name,
			 ucs_status_string(status));
		f->rc = -1;
	}
	ucp_request_free(request);
	if (--f->outstanding == 0 && f->issued)
		fetch_complete(f, f->rc);
}

/* One record of the home's FETCH_R: read the runs of its slot into our
 * slot's iovecs. Returns -1 (f->why set) when the whole fetch must fail;
 * a candidate that does not match is only skipped. */
static int fetch_record(struct fetch *f, const struct peer_fetch_r *h, const void *runs)
{
	struct node *nd = &P.nodes[f->node];
	struct peer_item *it = &f->it[h->index];
	if (h->status != 0) {
		snprintf(f->why, sizeof(f->why), "node %d (%s) cannot serve it: %s", f->node, nd->a.name,
			 strerror(h->status));
		return -1;
	}
	if (h->size != it->size || h->mtime_ns != it->mtime_ns) {
		if (h->index > 0)
			return 0; /* a changed candidate: not taken */
		snprintf(f->why, sizeof(f->why), "%s", "the file changed on its home node since the file lists were exchanged");
		return -1;
	}
	if (nd->rkey == NULL && ucp_ep_rkey_unpack(nd->ep, nd->rkey_buf, &nd->rkey) != UCS_OK) {
		nd->rkey = NULL;
		snprintf(f->why, sizeof(f->why), "cannot unpack the memory key of node %s", nd->a.name);
		return -1;
	}
	uint64_t bs = nd->block_size, off = 0, ro = 0, io = 0;
	uint32_t r = 0;
	int i = 0;
	while (off < it->size) {
		if (r >= h->nruns || i >= it->niov) {
			snprintf(f->why, sizeof(f->why), "%s", "the home's block list does not cover the file");
			return -1;
		}
		struct peer_run run = peer_wire_run(runs, r);
		uint64_t rlen = (uint64_t)run.count * bs - ro, llen = it->iov[i].iov_len - io;
		uint64_t n = it->size - off;
		n = n < rlen ? n : rlen;
		n = n < llen ? n : llen;
		uint64_t raddr = nd->base + nd->data_off + (uint64_t)run.first * bs + ro;
		ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
					   .cb.send = get_cb,
					   .user_data = f};
		ucs_status_ptr_t q = ucp_get_nbx(nd->ep, (char *)it->iov[i].iov_base + io, n, raddr, nd->rkey, &prm);
		if (UCS_PTR_IS_ERR(q)) {
			snprintf(f->why, sizeof(f->why), "RMA read failed: %s", ucs_status_string(UCS_PTR_STATUS(q)));
			return -1;
		}
		if (q)
			f->outstanding++;
		off += n;
		ro += n;
		io += n;
		if (ro == (uint64_t)run.count * bs) {
			r++;
			ro = 0;
		}
		if (io == it->iov[i].iov_len) {
			i++;
			io = 0;
		}
	}
	it->got = 1; /* undone by fetch_complete if any get fails */
	f->bytes += it->size;
	return 0;
}

static struct fetch *find_fetch(int node, uint64_t req)
{
	for (struct fetch *f = P.inflight; f; f = f->next)
		if (f->req == req && f->node == node)
			return f;
	return NULL;
}

/* ---- incoming messages ---- */

static void on_hello(const void *data, size_t len)
{
	struct peer_hello h = {0};
	if (peer_wire_hello(data, len, P.n, P.self, DLSHIM_BLOCK_SIZE, &h) < 0) {
		dlog(DLSHIM_LOG_WARN, "peers: ignoring a HELLO that does not match this cluster (node %u of %u, "
				      "version %u; this node expects %d nodes)",
		     h.node, h.nnodes, h.version, P.n);
		return;
	}
	struct node *nd = &P.nodes[h.node];
	void *rk = malloc(h.rkey_len);
	if (rk == NULL)
		return;
	memcpy(rk, (const char *)data + sizeof(h), h.rkey_len);
	if (nd->rkey)
		ucp_rkey_destroy(nd->rkey);
	nd->rkey = NULL;
	free(nd->rkey_buf);
	nd->rkey_buf = rk;
	nd->rkey_len = h.rkey_len;
	if (nd->incarnation != h.incarnation && nd->incarnation != 0)
		peer_home_expire((int)h.node); /* its old requests died with it */
	nd->incarnation = h.incarnation;
	nd->base = h.base;
	nd->data_off = h.data_off;
	nd->nblocks = h.nblocks;
	nd->block_size = h.block_size;
	nd->heard = 1;
	if (nd->ep == NULL)
		nd->next_try = 0; /* it is up: connect back now */
	else if (h.want_reply)
		introduce((int)h.node, 0);
}

static void on_fetch(const void *data, size_t len)
{
	struct peer_fetch h;
	const char *paths[1 + PEER_PREFETCH_MAX];
	int n = peer_wire_fetch(data, len, P.n, P.self, &h, paths);
	if (n < 0) {
		dlog(DLSHIM_LOG_WARN, "peers: malformed FETCH dropped");
		return;
	}
	peer_home_request((int)h.node, h.req, paths, n);
}

static void on_fetch_r(const void *data, size_t len)
{
	struct peer_fetch_r h;
	if (peer_wire_fetch_r_head(data, len, P.n, P.self, &h) < 0)
		return;
	struct fetch *f = find_fetch((int)h.node, h.req);
	if (f == NULL || f->replied) {
		if (h.status == 0)
			send_done((int)h.node, h.req); /* too late (timed out): let the home unpin */
		return;
	}
	struct node *nd = &P.nodes[h.node];
	f->replied = 1;
	/* The whole reply is checked before the first get is issued. */
	struct peer_wire_rec recs[1 + PEER_PREFETCH_MAX];
	int n = peer_wire_fetch_r(data, len, h.node, f->req, (uint32_t)f->n, nd->nblocks, recs);
	if (n == PEER_WIRE_MALFORMED) {
		dlog(DLSHIM_LOG_WARN, "peers: malformed FETCH_R from node %d dropped", f->node);
		snprintf(f->why, sizeof(f->why), "node %d (%s) sent a malformed reply", f->node, nd->a.name);
		f->rc = -1;
	} else if (n == PEER_WIRE_OUTSIDE) {
		snprintf(f->why, sizeof(f->why), "%s", "the home sent block runs outside its segment");
		f->rc = -1;
	}
	for (int k = 0; k < n; k++) {
		if (fetch_record(f, &recs[k].h, recs[k].runs) < 0) {
			if (k == 0 && recs[k].h.status != 0)
				f->replied = 0; /* nothing pinned there */
			f->rc = -1;
			break;
		}
	}
	f->issued = 1;
	if (f->outstanding == 0)
		fetch_complete(f, f->rc);
}

static void on_done(const void *data, size_t len)
{
	struct peer_done d;
	if (peer_wire_done(data, len, P.n, &d) == 0)
		peer_home_done((int)d.node, d.req, d.slot, d.gen);
}

static void dispatch(unsigned id, const void *data, size_t len)
{
	switch (id) {
	case PEER_AM_HELLO: on_hello(data, len); break;
	case PEER_AM_FILES: {
		struct peer_files h;
		if (peer_wire_files_head(data, len, P.n, P.self, &h) == 0) {
			if (peer_catalog_add_msg((int)h.node, data, len) < 0)
				dlog(DLSHIM_LOG_WARN, "peers: node %u sent file list entries outside DLSHIM_ROOTS or "
						      "malformed; they were skipped", h.node);
		}
		break;
	}
	case PEER_AM_FETCH: on_fetch(data, len); break;
	case PEER_AM_FETCH_R: on_fetch_r(data, len); break;
	case PEER_AM_DONE: on_done(data, len); break;
	case PEER_AM_CLAIM: peer_claims_on_claim(data, len); break;
	case PEER_AM_CLAIM_R: peer_claims_on_reply(data, len); break;
	default: break;
	}
}

struct rndv {
	unsigned id;
	size_t len;
	char data[];
};

static void rndv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
	struct rndv *r = user_data;
	if (status == UCS_OK)
		dispatch(r->id, r->data, length);
	free(r);
	ucp_request_free(request);
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data, size_t length,
			  const ucp_am_recv_param_t *param)
{
	(void)header;
	(void)header_length;
	unsigned id = (unsigned)(uintptr_t)arg;
	if (length > PEER_MSG_MAX + 4096)
		return UCS_OK; /* larger than anything we send: drop */
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
		dispatch(id, data, length);
		return UCS_OK;
	}
	/* Large messages arrive by rendezvous: fetch the payload first. */
	struct rndv *r = malloc(sizeof(*r) + length);
	if (r == NULL)
		return UCS_OK;
	r->id = id;
	r->len = length;
	ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
				   .cb.recv_am = rndv_cb,
				   .user_data = r};
	ucs_status_ptr_t q = ucp_am_recv_data_nbx(P.w, data, r->data, length, &prm);
	if (q == NULL) {
		dispatch(id, r->data, length);
		free(r);
	} else if (UCS_PTR_IS_ERR(q)) {
		free(r);
	}
	return UCS_OK;
}

/* ---- the transport thread ---- */

static void node_down(int i)
{
	struct node *nd = &P.nodes[i];
	const char *why = nd->failed ? ucs_status_string(nd->fail_status) : "no answer";
	pthread_mutex_lock(&P.mu);
	int was = nd->state;
	nd->state = NODE_DOWN;
	snprintf(nd->err, sizeof(nd->err), "unreachable: %s", why);
	nd->transport[0] = 0;
	pthread_mutex_unlock(&P.mu);
	(void)was;
	if (!nd->logged_down)
		dlog(DLSHIM_LOG_ERROR, "peers: node %d (%s) is unreachable (%s); its files cannot be fetched, local "
				       "data is still served", i, nd->a.name, why);
	nd->logged_down = 1;
	ep_close(nd->ep);
	nd->ep = NULL;
	nd->failed = 0;
	nd->heard = 0;
	if (nd->rkey)
		ucp_rkey_destroy(nd->rkey);
	nd->rkey = NULL;
	nd->next_try = time(NULL) + 1;
	peer_claims_node_down(i);
	for (struct fetch *f = P.inflight, *nx; f; f = nx) {
		nx = f->next;
		if (f->node == i) {
			f->replied = 0; /* nobody left to unpin */
			char d[300];
			snprintf(d, sizeof(d), "home node %d (%s) became unreachable (%s)", i, nd->a.name, why);
			fetch_fail(f, "%s", d);
		}
	}
}

static void housekeeping(void)
{
	time_t now = time(NULL);
	for (int i = 0; i < P.n; i++) {
		struct node *nd = &P.nodes[i];
		if (i == P.self)
			continue;
		if (nd->ep && (nd->failed || (!nd->heard && now - nd->connect_start > CONNECT_TIMEOUT_S)))
			node_down(i);
		if (nd->ep == NULL && now >= nd->next_try)
			node_connect(i);
		if (nd->ep && nd->heard && nd->state != NODE_UP) {
			pthread_mutex_lock(&P.mu);
			nd->state = NODE_UP;
			nd->err[0] = 0;
			pthread_mutex_unlock(&P.mu);
			nd->logged_down = 0;
			describe_transport(nd);
			dlog(DLSHIM_LOG_INFO, "peers: node %d (%s) is up, %ld files, transport %s", i, nd->a.name,
			     peer_catalog_count(i), nd->transport);
		}
	}
	for (int i = 0; i < MAX_INCOMING; i++)
		if (P.incoming[i] && P.incoming_failed[i]) {
			ep_close(P.incoming[i]);
			P.incoming[i] = NULL;
			P.incoming_failed[i] = 0;
		}
	for (struct fetch *f = P.inflight, *nx; f; f = nx) {
		nx = f->next;
		if (!f->replied && f->rc == 0 && now > f->deadline) {
			char d[300];
			snprintf(d, sizeof(d), "home node %d (%s) did not answer in %d s", f->node, P.nodes[f->node].a.name,
				 FETCH_TIMEOUT_S);
			fetch_fail(f, "%s", d);
		}
	}
	peer_home_expire(-1);
}

static void drain_queues(void)
{
	pthread_mutex_lock(&P.mu);
	struct fetch *nq = P.newq;
	struct sendop *sq = P.sendq;
	P.newq = NULL;
	P.sendq = NULL;
	pthread_mutex_unlock(&P.mu);
	for (struct sendop *op = sq, *nx; op; op = nx) {
		nx = op->next;
		send_am(op->node, op->id, op->msg, op->len);
		free(op);
	}
	for (struct fetch *f = nq, *nx; f; f = nx) {
		nx = f->next;
		struct node *nd = &P.nodes[f->node];
		f->next = P.inflight;
		P.inflight = f;
		size_t pl = 0;
		for (int k = 0; k < f->n; k++)
			pl += strlen(f->it[k].path) + 1;
		char *m = malloc(sizeof(struct peer_fetch) + pl);
		if (nd->state != NODE_UP || m == NULL) {
			free(m);
			char d[300];
			snprintf(d, sizeof(d), "home node %d (%s) is unreachable", f->node, nd->a.name);
			fetch_fail(f, "%s", d);
			continue;
		}
		struct peer_fetch h = {(uint32_t)P.self, (uint32_t)f->n - 1, f->req};
		memcpy(m, &h, sizeof(h));
		for (size_t k = 0, o = sizeof(h); k < (size_t)f->n; k++) {
			size_t l = strlen(f->it[k].path) + 1;
			memcpy(m + o, f->it[k].path, l);
			o += l;
		}
		f->deadline = time(NULL) + FETCH_TIMEOUT_S;
		if (send_am(f->node, PEER_AM_FETCH, m, sizeof(h) + pl) < 0)
			fetch_fail(f, "cannot send the request to %s", nd->a.name);
	}
}

static void *transport_thread(void *arg)
{
	(void)arg;
	time_t last = 0;
	for (;;) {
		drain_queues();
		if (time(NULL) != last) {
			last = time(NULL);
			housekeeping();
		}
		while (ucp_worker_progress(P.w))
			;
		if (ucp_worker_arm(P.w) == UCS_ERR_BUSY)
			continue;
		struct pollfd p[2] = {{P.efd, POLLIN, 0}, {P.wake_fd, POLLIN, 0}};
		if (poll(p, 2, 200) > 0 && (p[1].revents & POLLIN)) {
			uint64_t v;
			if (read(P.wake_fd, &v, sizeof(v)) < 0) {
				/* spurious wake-up */
			}
		}
	}
	return NULL;
}

/* ---- start-up ---- */

static int ucx_start(void)
{
	ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES,
			   .features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP};
	ucp_config_t *cfg;
	ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
	if (st == UCS_OK) {
		st = ucp_init(&pp, cfg, &P.ctx);
		ucp_config_release(cfg);
	}
	if (st != UCS_OK) {
		snprintf(P.error, sizeof(P.error), "cannot initialise UCX: %s", ucs_status_string(st));
		return -1;
	}
	ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
	if ((st = ucp_worker_create(P.ctx, &wp, &P.w)) != UCS_OK || (st = ucp_worker_get_efd(P.w, &P.efd)) != UCS_OK) {
		snprintf(P.error, sizeof(P.error), "cannot create the UCX worker: %s", ucs_status_string(st));
		return -1;
	}
	/* The whole cache segment is registered once: any slot can be read by
	 * a peer, and our gets land in registered memory. */
	ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
				   .address = D.shm_base,
				   .length = D.shm_len};
	if ((st = ucp_mem_map(P.ctx, &mp, &P.memh)) != UCS_OK ||
	    (st = ucp_rkey_pack(P.ctx, P.memh, &P.my_rkey, &P.my_rkey_len)) != UCS_OK) {
		snprintf(P.error, sizeof(P.error), "cannot register the cache with UCX: %s", ucs_status_string(st));
		return -1;
	}
	for (unsigned id = 1; id < PEER_AM_MAX; id++) {
		ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
							   UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
					     .id = id,
					     .cb = am_cb,
					     .arg = (void *)(uintptr_t)id,
					     .flags = UCP_AM_FLAG_WHOLE_MSG};
		if ((st = ucp_worker_set_am_recv_handler(P.w, &hp)) != UCS_OK) {
			snprintf(P.error, sizeof(P.error), "cannot set UCX message handlers: %s", ucs_status_string(st));
			return -1;
		}
	}
	struct sockaddr_storage ss;
	socklen_t sl;
	char err[512];
	if (resolve(&P.nodes[P.self].a, 1, &ss, &sl, err, sizeof(err)) < 0) {
		snprintf(P.error, sizeof(P.error), "%s", err);
		return -1;
	}
	ucp_listener_params_t lp = {.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
				    .sockaddr = {(struct sockaddr *)&ss, sl},
				    .conn_handler = {conn_cb, NULL}};
	if ((st = ucp_listener_create(P.w, &lp, &P.lis)) != UCS_OK) {
		snprintf(P.error, sizeof(P.error), "cannot listen on %s (DLSHIM_NODE's address): %s",
			 P.nodes[P.self].a.name, ucs_status_string(st));
		return -1;
	}
	return 0;
}

int peer_start(void)
{
	if (D.cfg.peers[0] == 0)
		return 1;
	static struct peer_addr addrs[PEER_MAX_NODES];
	char err[300];
	int n = peer_parse_members(D.cfg.peers, D.cfg.node, addrs, PEER_MAX_NODES, &P.self, err, sizeof(err));
	if (n < 0) {
		snprintf(P.error, sizeof(P.error), "%s", err);
		dlog(DLSHIM_LOG_ERROR, "peers: %s; serving local data only", err);
		return -1;
	}
	P.n = n;
	for (int i = 0; i < n; i++)
		P.nodes[i].a = addrs[i];
	P.prefetch_k = 8;
	const char *pf = getenv("DLSHIM_PREFETCH");
	if (pf && *pf) {
		char *e;
		long k = strtol(pf, &e, 10);
		if (*e || k < 0 || k > PEER_PREFETCH_MAX) {
			dlog(DLSHIM_LOG_ERROR, "peers: DLSHIM_PREFETCH=%s is not a number of files from 0 (off) to %d; "
					       "prefetch is off", pf, PEER_PREFETCH_MAX);
			k = 0;
		}
		P.prefetch_k = (int)k;
	}
	if (getrandom(&P.incarnation, sizeof(P.incarnation), 0) != sizeof(P.incarnation))
		P.incarnation = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	P.incarnation |= 1;
	P.next_req = 1;
	const struct dlshim_shm_header *hdr = D.shm_base;
	P.data_off = hdr->data_off;
	P.nblocks = hdr->nblocks;
	char roots[DLSHIM_MAX_ROOTS * (DLSHIM_PATH_MAX + 1)] = "";
	size_t rl = 0;
	for (int i = 0; i < D.cfg.nroots; i++)
		rl += (size_t)snprintf(roots + rl, sizeof(roots) - rl, "%s%s", i ? "," : "", D.cfg.roots[i]);
	long nf = D.cfg.nroots ? peer_catalog_scan_local(roots) : 0;
	if (ucx_start() < 0 || (P.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 || peer_home_start() < 0 ||
	    peer_claims_start() < 0) {
		if (P.error[0] == 0)
			snprintf(P.error, sizeof(P.error), "cannot start the peer threads");
		dlog(DLSHIM_LOG_ERROR, "peers: %s; serving local data only", P.error);
		return -1;
	}
	P.on = 1;
	pthread_t t;
	if (pthread_create(&t, NULL, transport_thread, NULL) != 0) {
		P.on = 0;
		snprintf(P.error, sizeof(P.error), "cannot start the transport thread");
		dlog(DLSHIM_LOG_ERROR, "peers: %s; serving local data only", P.error);
		return -1;
	}
	pthread_detach(t);
	dlog(DLSHIM_LOG_INFO, "peers: node %d of %d (%s), %ld local files, RDMA devices: %s", P.self, n,
	     P.nodes[P.self].a.name, nf, rdma_devices()[0] ? rdma_devices() : "none");
	return 0;
}

/* ---- requests from server threads ---- */

int peer_prefetch_k(void) { return P.prefetch_k; }

/* Remember which items arrived by prefetch, for the hit count. */
static void mark_prefetched(uint32_t item, int on)
{
	pthread_mutex_lock(&P.mu);
	if (item >= P.pf_cap && on) {
		size_t cap = P.pf_cap ? P.pf_cap : 4096;
		while (cap <= item)
			cap *= 2;
		unsigned char *v = realloc(P.pf_items, cap);
		if (v) {
			memset(v + P.pf_cap, 0, cap - P.pf_cap);
			P.pf_items = v;
			P.pf_cap = cap;
		}
	}
	if (item < P.pf_cap)
		P.pf_items[item] = (unsigned char)on;
	pthread_mutex_unlock(&P.mu);
}

void peer_note_served(uint32_t item)
{
	pthread_mutex_lock(&P.mu);
	if (item < P.pf_cap && P.pf_items[item]) {
		P.pf_items[item] = 0;
		P.prefetch_hits++;
	}
	pthread_mutex_unlock(&P.mu);
}

int peer_fetch_items(struct peer_item *it, int n, char *why, size_t whylen)
{
	why[0] = 0;
	for (int k = 0; k < n; k++)
		it[k].got = 0;
	if (!P.on) {
		snprintf(why, whylen, "multi-node caching is off");
		return -1;
	}
	uint64_t size, holders;
	int64_t mtime;
	if (peer_catalog_find(it[0].path, &size, &mtime, &holders) < 0) {
		snprintf(why, whylen, "no node holds it");
		return -1;
	}
	/* Spread requests for replicated files over their holders. */
	static _Atomic unsigned rot;
	unsigned start = rot++;
	int tried = 0;
	struct peer_item *send = malloc((size_t)(1 + PEER_PREFETCH_MAX) * sizeof(*send));
	int *from = malloc((size_t)(1 + PEER_PREFETCH_MAX) * sizeof(*from));
	if (send == NULL || from == NULL) {
		free(send);
		free(from);
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	for (int k = 0; k < P.n; k++) {
		int i = (int)((start + (unsigned)k) % (unsigned)P.n);
		if (i == P.self || !(holders & (1ULL << i)))
			continue;
		pthread_mutex_lock(&P.mu);
		int up = P.nodes[i].state == NODE_UP;
		if (!up && !tried)
			snprintf(why, whylen, "home node %d (%s) is %s", i, P.nodes[i].a.name,
				 P.nodes[i].err[0] ? P.nodes[i].err : "not connected yet");
		pthread_mutex_unlock(&P.mu);
		if (!up)
			continue;
		/* The candidates this node holds, at most DLSHIM_PREFETCH. */
		int m = 1;
		send[0] = it[0];
		from[0] = 0;
		for (int c = 1; c < n && m <= P.prefetch_k && m <= PEER_PREFETCH_MAX; c++) {
			uint64_t cs, ch;
			int64_t cm;
			if (peer_catalog_find(it[c].path, &cs, &cm, &ch) == 0 && (ch & (1ULL << i)) && cs == it[c].size) {
				from[m] = c;
				send[m++] = it[c];
			}
		}
		struct fetch f = {.node = i, .it = send, .n = m};
		pthread_mutex_lock(&P.mu);
		f.req = P.next_req++;
		f.next = P.newq;
		P.newq = &f;
		pthread_mutex_unlock(&P.mu);
		wake();
		pthread_mutex_lock(&P.mu);
		while (!f.done)
			pthread_cond_wait(&P.cv, &P.mu);
		P.remote_requests++;
		P.prefetch_asked += (uint64_t)(m - 1);
		if (f.rc == 0) {
			P.remote_ok++;
			P.remote_bytes += f.bytes;
			for (int c = 1; c < m; c++)
				P.prefetched += send[c].got != 0;
		} else {
			P.remote_failures++;
		}
		pthread_mutex_unlock(&P.mu);
		if (f.rc == 0) {
			for (int c = 0; c < m; c++) {
				it[from[c]].got = send[c].got;
				mark_prefetched(send[c].item, c > 0 && send[c].got);
			}
			free(send);
			free(from);
			return 0;
		}
		tried = 1;
		snprintf(why, whylen, "%s", f.why);
	}
	free(send);
	free(from);
	if (!tried) {
		pthread_mutex_lock(&P.mu);
		P.remote_failures++; /* no holder was up: nothing was sent */
		pthread_mutex_unlock(&P.mu);
	}
	if (why[0] == 0)
		snprintf(why, whylen, "no node holds it");
	return -1;
}

void peer_count_remote(int ok, uint64_t bytes, int local_hit)
{
	pthread_mutex_lock(&P.mu);
	if (local_hit) {
		P.remote_local_hits++;
	} else {
		P.remote_requests++;
		if (ok) {
			P.remote_ok++;
			P.remote_bytes += bytes;
		} else {
			P.remote_failures++;
		}
	}
	pthread_mutex_unlock(&P.mu);
}

/* ---- stats ---- */

size_t peer_json(char *buf, size_t cap)
{
	size_t len = 0;
#define PUT(...)                                                                  \
	do {                                                                      \
		if (len < cap) {                                                  \
			int n_ = snprintf(buf + len, cap - len, __VA_ARGS__);     \
			len = n_ < 0 ? len : len + (size_t)n_ < cap ? len + (size_t)n_ : cap - 1; \
		}                                                                 \
	} while (0)
	char e[600], devs[600];
	peer_json_str(devs, sizeof(devs), rdma_devices());
	if (!P.on) {
		peer_json_str(e, sizeof(e), P.error);
		PUT("{\"enabled\":false,\"error\":\"%s\",\"rdma_devices\":\"%s\"}", e, devs);
		return len;
	}
	pthread_mutex_lock(&P.mu);
	PUT("{\"enabled\":true,\"node\":%d,\"rdma_devices\":\"%s\",\"local_files\":%ld,"
	    "\"remote\":{\"requests\":%llu,\"ok\":%llu,\"bytes\":%llu,\"failures\":%llu,\"local_hits\":%llu},"
	    "\"prefetch\":{\"k\":%d,\"asked\":%llu,\"received\":%llu,\"hits\":%llu},",
	    P.self, devs, peer_catalog_count(-1), (unsigned long long)P.remote_requests, (unsigned long long)P.remote_ok,
	    (unsigned long long)P.remote_bytes, (unsigned long long)P.remote_failures,
	    (unsigned long long)P.remote_local_hits, P.prefetch_k, (unsigned long long)P.prefetch_asked,
	    (unsigned long long)P.prefetched, (unsigned long long)P.prefetch_hits);
	PUT("\"nodes\":[");
	static const char *names[] = {"unreachable", "connecting", "up"};
	for (int i = 0; i < P.n; i++) {
		struct node *nd = &P.nodes[i];
		char a[300], t[260];
		peer_json_str(a, sizeof(a), nd->a.name);
		peer_json_str(e, sizeof(e), nd->err);
		peer_json_str(t, sizeof(t), nd->transport);
		if (i == P.self)
			PUT("%s{\"index\":%d,\"addr\":\"%s\",\"self\":true}", i ? "," : "", i, a);
		else
			PUT("%s{\"index\":%d,\"addr\":\"%s\",\"state\":\"%s\",\"error\":\"%s\",\"transport\":\"%s\","
			    "\"files\":%ld,\"fetches\":%llu,\"bytes\":%llu}",
			    i ? "," : "", i, a, names[nd->state], e, t, peer_catalog_count(i),
			    (unsigned long long)nd->fetches, (unsigned long long)nd->bytes);
	}
	pthread_mutex_unlock(&P.mu);
	PUT("],");
	len += peer_home_json(buf + len, cap - len);
	PUT(",");
	len += peer_claims_json(buf + len, cap - len);
	PUT("}");
	return len;
#undef PUT
}
