/* dlshim: the command-line tool (status, stats, top, stop, run). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dlshim/config.h"
#include "dlshim/packet.h"
#include "dlshim/proto.h"
#include "dlshim/rundir.h"

static struct dlshim_config cfg;
static char reply_buf[DLSHIM_MSG_MAX + sizeof(struct dlshim_msg_hdr)];

static const char *env_get(const char *name) { return getenv(name); }

static void usage(FILE *f)
{
	fprintf(f, "usage: dlshim COMMAND\n"
		   "  status                   is the coordinator running; clients, jobs, cache use (exit 3 if not running)\n"
		   "  stats [--epochs]         per-job requests, hits, bytes from cache and disk, redirects, epochs, I/O efficiency;\n"
		   "                           --epochs adds a per-epoch table for every job\n"
		   "  stats --json             the coordinator's JSON (docs/interfaces.md)\n"
		   "  stats --prometheus       Prometheus text exposition format\n"
		   "  stats --from FILE ...    format a saved `stats --json` output (FILE or - for stdin) instead\n"
		   "  top [--interval S] [--count N]\n"
		   "                           per-job rates (opens/s, hit rate, MB/s from cache and disk) every S seconds\n"
		   "                           (default 2); N frames then exit (default: until interrupted)\n"
		   "  stop                     stop the coordinator\n"
		   "  run [--] CMD...          run CMD with the shim preloaded (set DLSHIM_ROOTS first)\n"
		   "  help                     this text\n");
}

static int connect_control(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (rundir_sock_path(cfg.runtime_dir, a.sun_path, sizeof(a.sun_path)) < 0)
		return -1;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	struct timeval tv = {10, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Send a request and receive the reply of type `want`; returns payload length. */
static long request(int fd, uint16_t type, const void *p, uint32_t len, uint16_t want)
{
	char out[sizeof(struct dlshim_msg_hdr) + 512];
	size_t n = dlshim_msg_encode(out, type, 1, p, len);
	if (dlshim_send_packet(fd, out, n, -1) < 0)
		return -1;
	int fds[DLSHIM_PACKET_MAX_FDS], nfds, trunc;
	ssize_t r = dlshim_recv_packet(fd, reply_buf, sizeof(reply_buf) - 1, fds, &nfds, &trunc);
	for (int i = 0; i < nfds; i++)
		close(fds[i]); /* the CLI never maps the cache */
	if (r <= 0 || trunc)
		return -1;
	struct dlshim_msg_hdr h;
	const void *payload;
	const char *why;
	if (dlshim_msg_decode(reply_buf, (size_t)r, &h, &payload, &why) < 0 || h.type != want)
		return -1;
	memmove(reply_buf, payload, h.len);
	reply_buf[h.len] = 0;
	return h.len;
}

static int control_session(void)
{
	int fd = connect_control();
	if (fd < 0)
		return -1;
	struct dlshim_msg_hello h;
	memset(&h, 0, sizeof(h));
	h.pid = (uint32_t)getpid();
	h.kind = DLSHIM_HELLO_CONTROL;
	if (request(fd, DLSHIM_MSG_HELLO, &h, sizeof(h), DLSHIM_MSG_HELLO_OK) != sizeof(struct dlshim_msg_hello_ok)) {
		close(fd);
		return -1;
	}
	return fd;
}

static const char *fetch_json(void)
{
	int fd = control_session();
	if (fd < 0)
		return NULL;
	long n = request(fd, DLSHIM_MSG_STATS, NULL, 0, DLSHIM_MSG_TEXT);
	close(fd);
	return n < 0 ? NULL : reply_buf;
}

/* Minimal extraction of a numeric or string field after position p. */
static const char *field(const char *p, const char *key, char *out, size_t len)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	const char *q = strstr(p, pat);
	if (q == NULL) {
		snprintf(out, len, "?");
		return p;
	}
	q += strlen(pat);
	if (*q == '"')
		q++;
	size_t i = 0;
	while (*q && *q != ',' && *q != '"' && *q != '}' && i + 1 < len)
		out[i++] = *q++;
	out[i] = 0;
	return q;
}

static double num(const char *p, const char *key)
{
	char v[64];
	field(p, key, v, sizeof(v));
	return strtod(v, NULL);
}

static void human_bytes(double b, char *out, size_t len)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;
	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	snprintf(out, len, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

static void print_peers(const char *json);

static int cmd_status(void)
{
	const char *j = fetch_json();
	if (j == NULL) {
		printf("dlshim coordinator: not running (runtime dir %s)\n", cfg.runtime_dir);
		return 3;
	}
	const char *cache = strstr(j, "\"cache\"");
	char cap[32], used[32];
	human_bytes(num(cache, "capacity_bytes"), cap, sizeof(cap));
	human_bytes(num(cache, "used_bytes"), used, sizeof(used));
	int live = 0, total = 0;
	for (const char *p = strstr(j, "\"jobs\""); p && (p = strstr(p, "\"live\":")); p++) {
		total++;
		live += strncmp(p + 7, "true", 4) == 0;
	}
	printf("dlshim coordinator: running (pid %.0f, up %.0f s, runtime dir %s)\n", num(j, "pid"), num(j, "uptime_s"),
	       cfg.runtime_dir);
	printf("  clients: %.0f connections in %.0f processes\n", num(j, "clients"), num(j, "sessions"));
	printf("  jobs:    %d live, %d ended\n", live, total - live);
	printf("  cache:   %s used of %s, %.0f files resident, %.0f pinned, eviction %s\n", used, cap,
	       num(cache, "items_resident"), num(cache, "items_pinned"), strstr(j, "\"evict\":\"lru\"") ? "lru" :
	       strstr(j, "\"evict\":\"fifo\"") ? "fifo" : strstr(j, "\"evict\":\"random\"") ? "random" : "refcnt");
	print_peers(j);
	return 0;
}

/* ---- A small JSON reader, enough for the coordinator's own output ----
 *
 * The whole document is parsed into a flat array of nodes (children linked by
 * index). Strings are decoded in place (the buffer is ours); numbers keep
 * their text so that 64-bit counters print exactly. The coordinator's reply
 * is capped at DLSHIM_MSG_MAX bytes, so a document cut short is accepted: open
 * containers are closed, the value that was being read is dropped, and
 * `truncated` is set. */
enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jnode {
	enum jtype t;
	const char *key; /* member name inside an object, else NULL */
	const char *s;	 /* J_STR: NUL-terminated value; J_NUM: the number's text */
	size_t slen;
	int b;		  /* J_BOOL */
	int child, last; /* first and last child (containers), -1 if none */
	int next;	  /* next sibling, -1 if none */
	int partial;	  /* container closed by the end of a cut-short input */
};

struct jdoc {
	char *buf;
	struct jnode *n;
	int len, cap;
	int truncated;
};

struct jparse {
	struct jdoc *d;
	char *p;
	int eof;   /* the input ended where more was expected */
	int depth;
};

static int jnew(struct jparse *ps, enum jtype t)
{
	struct jdoc *d = ps->d;
	if (d->len == d->cap) {
		int cap = d->cap ? d->cap * 2 : 256;
		struct jnode *n = realloc(d->n, (size_t)cap * sizeof(*n));
		if (n == NULL)
			return -1;
		d->n = n;
		d->cap = cap;
	}
	struct jnode *x = &d->n[d->len];
	memset(x, 0, sizeof(*x));
	x->t = t;
	x->child = x->last = x->next = -1;
	return d->len++;
}

static void jskip_ws(struct jparse *ps)
{
	while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
		ps->p++;
}

static int jhex(const char *p, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

/* Decode the string at ps->p (after the opening quote) in place; returns its start. */
static char *jstring(struct jparse *ps)
{
	char *start = ps->p, *w = ps->p, *r = ps->p;
	for (;;) {
		unsigned char c = (unsigned char)*r;
		if (c == 0) {
			ps->eof = 1;
			return NULL;
		}
		if (c == '"')
			break;
		if (c < 0x20)
			return NULL;
		if (c != '\\') {
			*w++ = *r++;
			continue;
		}
		r++;
		switch (*r) {
		case 0:
			ps->eof = 1;
			return NULL;
		case '"': case '\\': case '/': *w++ = *r++; break;
		case 'b': *w++ = '\b'; r++; break;
		case 'f': *w++ = '\f'; r++; break;
		case 'n': *w++ = '\n'; r++; break;
		case 'r': *w++ = '\r'; r++; break;
		case 't': *w++ = '\t'; r++; break;
		case 'u': {
			unsigned u, lo;
			if (strnlen(r + 1, 4) < 4) {
				ps->eof = 1;
				return NULL;
			}
			if (jhex(r + 1, &u) < 0)
				return NULL;
			r += 5;
			if (u >= 0xd800 && u < 0xdc00 && r[0] == '\\' && r[1] == 'u' && strnlen(r + 2, 4) == 4 &&
			    jhex(r + 2, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000) {
				u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
				r += 6;
			}
			if (u < 0x80) {
				*w++ = (char)u;
			} else if (u < 0x800) {
				*w++ = (char)(0xc0 | (u >> 6));
				*w++ = (char)(0x80 | (u & 0x3f));
			} else if (u < 0x10000) {
				*w++ = (char)(0xe0 | (u >> 12));
				*w++ = (char)(0x80 | ((u >> 6) & 0x3f));
				*w++ = (char)(0x80 | (u & 0x3f));
			} else {
				*w++ = (char)(0xf0 | (u >> 18));
				*w++ = (char)(0x80 | ((u >> 12) & 0x3f));
				*w++ = (char)(0x80 | ((u >> 6) & 0x3f));
				*w++ = (char)(0x80 | (u & 0x3f));
			}
			break;
		}
		default:
			return NULL;
		}
	}
	ps->p = r + 1; /* past the closing quote (before the NUL may overwrite it) */
	*w = 0;
	return start;
}

static int jvalue(struct jparse *ps);

static void jappend(struct jdoc *d, int parent, int child)
{
	if (d->n[parent].last < 0)
		d->n[parent].child = child;
	else
		d->n[d->n[parent].last].next = child;
	d->n[parent].last = child;
}

/* Parse a container whose opening bracket was consumed; children that parse
 * are kept when the input ends early. */
static int jcontainer(struct jparse *ps, int obj)
{
	int self = jnew(ps, obj ? J_OBJ : J_ARR);
	if (self < 0 || ++ps->depth > 64)
		return -1;
	char close = obj ? '}' : ']';
	jskip_ws(ps);
	if (*ps->p == close) {
		ps->p++;
		ps->depth--;
		return self;
	}
	for (;;) {
		const char *key = NULL;
		jskip_ws(ps);
		if (*ps->p == 0) {
			ps->eof = 1;
			break;
		}
		if (obj) {
			if (*ps->p != '"')
				return -1;
			ps->p++;
			key = jstring(ps);
			if (key == NULL)
				break;
			jskip_ws(ps);
			if (*ps->p == 0) {
				ps->eof = 1;
				break;
			}
			if (*ps->p != ':')
				return -1;
			ps->p++;
		}
		int v = jvalue(ps);
		if (v < 0)
			break;
		ps->d->n[v].key = key;
		jappend(ps->d, self, v);
		jskip_ws(ps);
		if (*ps->p == ',') {
			ps->p++;
			continue;
		}
		if (*ps->p == close) {
			ps->p++;
			ps->depth--;
			return self;
		}
		if (*ps->p == 0)
			ps->eof = 1;
		break;
	}
	/* cut short: keep what we have */
	ps->depth--;
	ps->d->n[self].partial = 1;
	return ps->eof ? self : -1;
}

static int jvalue(struct jparse *ps)
{
	jskip_ws(ps);
	char c = *ps->p;
	if (c == 0) {
		ps->eof = 1;
		return -1;
	}
	if (c == '{' || c == '[') {
		ps->p++;
		return jcontainer(ps, c == '{');
	}
	if (c == '"') {
		ps->p++;
		const char *s = jstring(ps);
		if (s == NULL)
			return -1;
		int i = jnew(ps, J_STR);
		if (i >= 0) {
			ps->d->n[i].s = s;
			ps->d->n[i].slen = strlen(s);
		}
		return i;
	}
	static const struct {
		const char *word;
		enum jtype t;
		int b;
	} lit[] = {{"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
	for (size_t k = 0; k < sizeof(lit) / sizeof(lit[0]); k++) {
		size_t wl = strlen(lit[k].word), have = strnlen(ps->p, wl);
		if (strncmp(ps->p, lit[k].word, have) != 0)
			continue;
		if (have < wl) {
			ps->eof = 1;
			return -1;
		}
		ps->p += wl;
		int i = jnew(ps, lit[k].t);
		if (i >= 0)
			ps->d->n[i].b = lit[k].b;
		return i;
	}
	if (c == '-' || (c >= '0' && c <= '9')) {
		char *end;
		strtod(ps->p, &end);
		if (end == ps->p)
			return -1;
		if (*end == 0) { /* a number touching the end may have lost digits */
			ps->eof = 1;
			return -1;
		}
		int i = jnew(ps, J_NUM);
		if (i >= 0) {
			ps->d->n[i].s = ps->p;
			ps->d->n[i].slen = (size_t)(end - ps->p);
		}
		ps->p = end;
		return i;
	}
	return -1;
}

/* Parse text (copied); returns 0, or -1 if it is not JSON (or not an object). */
static int jparse_doc(struct jdoc *d, const char *text)
{
	memset(d, 0, sizeof(*d));
	d->buf = strdup(text);
	if (d->buf == NULL)
		return -1;
	struct jparse ps = {d, d->buf, 0, 0};
	int root = jvalue(&ps);
	if (root != 0 || d->n[0].t != J_OBJ)
		return -1;
	d->truncated = ps.eof;
	return 0;
}

static void jfree(struct jdoc *d)
{
	free(d->buf);
	free(d->n);
	memset(d, 0, sizeof(*d));
}

static int jget(const struct jdoc *d, int obj, const char *key)
{
	if (obj < 0 || d->n[obj].t != J_OBJ)
		return -1;
	for (int c = d->n[obj].child; c >= 0; c = d->n[c].next)
		if (d->n[c].key && strcmp(d->n[c].key, key) == 0)
			return c;
	return -1;
}

/* Numeric value of obj.key (bools are 0/1); returns 0 if present. */
static int jnumber(const struct jdoc *d, int obj, const char *key, double *out)
{
	int i = jget(d, obj, key);
	if (i < 0)
		return -1;
	if (d->n[i].t == J_NUM)
		*out = strtod(d->n[i].s, NULL);
	else if (d->n[i].t == J_BOOL)
		*out = d->n[i].b;
	else
		return -1;
	return 0;
}

static double jnum0(const struct jdoc *d, int obj, const char *key)
{
	double v = 0;
	jnumber(d, obj, key, &v);
	return v;
}

static const char *jstr(const struct jdoc *d, int obj, const char *key)
{
	int i = jget(d, obj, key);
	return i >= 0 && d->n[i].t == J_STR ? d->n[i].s : NULL;
}

/* The multi-node part of `status`: each peer's reachability and the
 * transport UCX chose for it (so a user sees whether RDMA is in use). */
static void print_peers(const char *json)
{
	struct jdoc d;
	if (jparse_doc(&d, json) < 0) {
		jfree(&d);
		return;
	}
	int p = jget(&d, 0, "peers");
	const char *devs = jstr(&d, p, "rdma_devices");
	if (p < 0 || !jnum0(&d, p, "enabled")) {
		const char *err = jstr(&d, p, "error");
		if (err && err[0])
			printf("  peers:   multi-node off: %s\n", err);
		jfree(&d);
		return;
	}
	int r = jget(&d, p, "remote"), s = jget(&d, p, "served");
	char rb[32], sb[32];
	human_bytes(jnum0(&d, r, "bytes"), rb, sizeof(rb));
	human_bytes(jnum0(&d, s, "bytes"), sb, sizeof(sb));
	printf("  peers:   this is node %.0f, %.0f local files; RDMA devices: %s\n", jnum0(&d, p, "node"),
	       jnum0(&d, p, "local_files"), devs && devs[0] ? devs : "none");
	int pf = jget(&d, p, "prefetch");
	printf("  remote:  %.0f requests, %.0f ok (%s), %.0f failed, %.0f re-opens served from this cache; "
	       "served to peers %.0f files (%s, %.0f of them prefetched)\n",
	       jnum0(&d, r, "requests"), jnum0(&d, r, "ok"), rb, jnum0(&d, r, "failures"), jnum0(&d, r, "local_hits"),
	       jnum0(&d, s, "files"), sb, jnum0(&d, s, "prefetched"));
	if (jnum0(&d, pf, "k") > 0)
		printf("  prefetch: up to %.0f files per request; %.0f asked, %.0f received, %.0f hits\n",
		       jnum0(&d, pf, "k"), jnum0(&d, pf, "asked"), jnum0(&d, pf, "received"), jnum0(&d, pf, "hits"));
	else
		printf("  prefetch: off (DLSHIM_PREFETCH=0)\n");
	/* Jobs whose ranks run on several nodes claim each file they serve. */
	int cl = jget(&d, p, "claims");
	double asked = jnum0(&d, cl, "asked_local") + jnum0(&d, cl, "asked_remote");
	if (asked > 0 || jnum0(&d, cl, "answered") > 0)
		printf("  claims:  %.0f asked (%.0f of another node), %.0f refused, %.0f unverified; "
		       "%.0f answered for peers, authority for %.0f groups\n",
		       asked, jnum0(&d, cl, "asked_remote"), jnum0(&d, cl, "refused"), jnum0(&d, cl, "unverified"),
		       jnum0(&d, cl, "answered"), jnum0(&d, cl, "groups"));
	int nodes = jget(&d, p, "nodes");
	for (int c = nodes >= 0 ? d.n[nodes].child : -1; c >= 0; c = d.n[c].next) {
		const char *addr = jstr(&d, c, "addr");
		if (jnum0(&d, c, "self")) {
			printf("    node %.0f %s: this node\n", jnum0(&d, c, "index"), addr ? addr : "?");
			continue;
		}
		const char *st = jstr(&d, c, "state"), *err = jstr(&d, c, "error"), *tr = jstr(&d, c, "transport");
		printf("    node %.0f %s: %s", jnum0(&d, c, "index"), addr ? addr : "?", st ? st : "?");
		if (st && strcmp(st, "up") == 0)
			printf(", %.0f files, transport %s", jnum0(&d, c, "files"), tr && tr[0] ? tr : "unknown");
		else if (err && err[0])
			printf(" (%s)", err);
		printf("\n");
	}
	jfree(&d);
}

/* Whether a job (or per-epoch) object can be shown: complete, or, for a job
 * cut inside its per_epoch list (the coordinator writes it last), with every
 * counter before it. A cut-short job or epoch is left out rather than shown
 * with counters missing. */
static int jcomplete(const struct jdoc *d, int obj)
{
	return obj >= 0 && (!d->n[obj].partial || jget(d, obj, "per_epoch") >= 0);
}

/* A saved `dlshim stats --json` output (FILE, or - for stdin), NUL-terminated. */
static char *read_saved(const char *path)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	if (f == NULL) {
		fprintf(stderr, "dlshim: cannot open %s: %s\n", path, strerror(errno));
		return NULL;
	}
	size_t cap = 1 << 16, len = 0, n;
	char *buf = malloc(cap);
	while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (len + 1 == cap) {
			char *b = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
			if (b == NULL) {
				fprintf(stderr, "dlshim: %s is too large\n", path);
				free(buf);
				buf = NULL;
				break;
			}
			buf = b;
			cap *= 2;
		}
	}
	if (f != stdin)
		fclose(f);
	if (buf)
		buf[len] = 0;
	return buf;
}

static const char *saved_path; /* stats --from FILE */

/* Fetch and parse the coordinator's stats (or the --from file); returns 0,
 * 3 (not running), 1 (bad reply). */
static int fetch_doc(struct jdoc *d)
{
	char *saved = NULL;
	const char *j;
	if (saved_path) {
		j = saved = read_saved(saved_path);
		if (saved == NULL)
			return 1;
	} else {
		j = fetch_json();
		if (j == NULL)
			return 3;
	}
	int bad = jparse_doc(d, j) < 0;
	free(saved);
	if (bad) {
		fprintf(stderr, "dlshim: could not parse %s\n", saved_path ? saved_path : "the coordinator's stats");
		jfree(d);
		return 1;
	}
	if (d->truncated && saved_path)
		fprintf(stderr, "dlshim: warning: %s ends early; some jobs or epochs are missing\n", saved_path);
	else if (d->truncated)
		fprintf(stderr, "dlshim: warning: the coordinator's stats were cut at %u bytes; some jobs or epochs are missing\n",
			DLSHIM_MSG_MAX);
	return 0;
}

static int not_running(void)
{
	fprintf(stderr, "dlshim: the coordinator is not running (runtime dir %s)\n", cfg.runtime_dir);
	return 3;
}

/* ---- stats: human tables ---- */

/* Width of the job column: the longest job name, at least 28. */
static int name_width(const struct jdoc *d)
{
	int w = 28, jobs = jget(d, 0, "jobs");
	if (jobs < 0)
		return w;
	for (int j = d->n[jobs].child; j >= 0; j = d->n[j].next) {
		const char *name = jstr(d, j, "job");
		if (name && (int)strlen(name) > w)
			w = (int)strlen(name) > 128 ? 128 : (int)strlen(name);
	}
	return w;
}

static void fmt_eff(double consumed_eff, double from_disk, char *out, size_t len)
{
	if (from_disk <= 0)
		snprintf(out, len, "-");
	else
		snprintf(out, len, "%.2f", consumed_eff);
}

/* The randomness report: how far each finished epoch's served order is from
 * an independent shuffle (engine/order_stats.c defines each measure). */
static void print_order(const struct jdoc *d, int pe)
{
	int header = 0;
	for (int e = d->n[pe].child; e >= 0; e = d->n[e].next) {
		int o = jget(d, e, "order");
		if (!jcomplete(d, e) || o < 0 || !jcomplete(d, o))
			continue;
		if (!header++)
			printf("\n  order of the served files (in brackets: an independent shuffle's value)\n"
			       "  %6s %7s %12s %16s %16s %9s\n",
			       "epoch", "files", "displacement", "chunk locality", "pair repeat", "class mix");
		char rep[32] = "-";
		double v;
		if (jnumber(d, o, "pair_repeat", &v) == 0)
			snprintf(rep, sizeof(rep), "%.3f (%.3f)", v, jnum0(d, o, "pair_repeat_shuffle"));
		char loc[32];
		snprintf(loc, sizeof(loc), "%.3f (%.3f)", jnum0(d, o, "locality"), jnum0(d, o, "locality_shuffle"));
		printf("  %6.0f %7.0f %12.3f %16s %16s %9.3f\n", jnum0(d, e, "epoch"), jnum0(d, o, "files"),
		       jnum0(d, o, "displacement"), loc, rep, jnum0(d, o, "class_mix"));
	}
}

static void print_epochs(const struct jdoc *d, int job)
{
	int pe = jget(d, job, "per_epoch");
	const char *name = jstr(d, job, "job");
	printf("\nepochs of %s:\n", name ? name : "?");
	if (pe < 0 || d->n[pe].t != J_ARR || d->n[pe].child < 0) {
		printf("  (none)\n");
		return;
	}
	printf("  %6s %8s %9s %9s %11s %11s %11s %11s %7s\n", "epoch", "complete", "requests", "redirects",
	       "chunk loads", "from disk", "consumed", "waste", "io eff");
	for (int e = d->n[pe].child; e >= 0; e = d->n[e].next) {
		if (!jcomplete(d, e))
			continue;
		char disk[32], cons[32], waste[32], eff[16];
		double bd = jnum0(d, e, "bytes_from_disk");
		human_bytes(bd, disk, sizeof(disk));
		human_bytes(jnum0(d, e, "bytes_consumed"), cons, sizeof(cons));
		human_bytes(jnum0(d, e, "waste_bytes"), waste, sizeof(waste));
		fmt_eff(jnum0(d, e, "io_efficiency"), bd, eff, sizeof(eff));
		printf("  %6.0f %8s %9.0f %9.0f %11.0f %11s %11s %11s %7s\n", jnum0(d, e, "epoch"),
		       jnum0(d, e, "complete") != 0 ? "yes" : "no", jnum0(d, e, "requests"), jnum0(d, e, "redirects"),
		       jnum0(d, e, "chunk_loads"), disk, cons, waste, eff);
	}
	print_order(d, pe);
}

static int stats_human(const struct jdoc *d, int epochs)
{
	int jobs = jget(d, 0, "jobs"), w = name_width(d);
	printf("%-*s %5s %9s %9s %9s %11s %11s %11s %9s %6s %7s\n", w, "job", "live", "requests", "hits", "misses",
	       "from cache", "from disk", "passthru", "redirects", "epochs", "io eff");
	if (jobs < 0)
		return 0;
	for (int j = d->n[jobs].child; j >= 0; j = d->n[j].next) {
		if (!jcomplete(d, j))
			continue;
		const char *name = jstr(d, j, "job");
		char a[32], b[32], c[32], eff[16];
		double bd = jnum0(d, j, "bytes_from_disk");
		human_bytes(jnum0(d, j, "bytes_from_cache"), a, sizeof(a));
		human_bytes(bd, b, sizeof(b));
		human_bytes(jnum0(d, j, "bytes_passthrough"), c, sizeof(c));
		fmt_eff(jnum0(d, j, "io_efficiency"), bd, eff, sizeof(eff));
		printf("%-*s %5s %9.0f %9.0f %9.0f %11s %11s %11s %9.0f %6.0f %7s\n", w, name ? name : "?",
		       jnum0(d, j, "live") != 0 ? "yes" : "no", jnum0(d, j, "requests"), jnum0(d, j, "hits"),
		       jnum0(d, j, "misses"), a, b, c, jnum0(d, j, "redirects"), jnum0(d, j, "epochs"), eff);
	}
	if (epochs)
		for (int j = d->n[jobs].child; j >= 0; j = d->n[j].next)
			if (jcomplete(d, j))
				print_epochs(d, j);
	return 0;
}

/* ---- stats --prometheus ---- */

struct metric {
	const char *name, *type, *key, *help;
};

static const struct metric daemon_metrics[] = {
	{"dlshim_coordinator_uptime_seconds", "gauge", "uptime_s", "Seconds since the coordinator started."},
	{"dlshim_coordinator_sessions", "gauge", "sessions", "Client processes connected to the coordinator."},
	{"dlshim_coordinator_clients", "gauge", "clients", "Client connections to the coordinator."},
};

static const struct metric cache_metrics[] = {
	{"dlshim_cache_capacity_bytes", "gauge", "capacity_bytes", "Size of the shared-memory cache."},
	{"dlshim_cache_used_bytes", "gauge", "used_bytes", "Bytes of the cache holding files."},
	{"dlshim_cache_items_resident", "gauge", "items_resident", "Files resident in the cache."},
	{"dlshim_cache_items_pinned", "gauge", "items_pinned", "Resident files pinned by open descriptors."},
	{"dlshim_cache_items_known", "gauge", "items_known", "Files the coordinator knows of."},
	{"dlshim_cache_loads_total", "counter", "loads", "Files loaded from storage into the cache."},
	{"dlshim_cache_evictions_total", "counter", "evictions", "Files evicted from the cache."},
	{"dlshim_cache_stale_reloads_total", "counter", "stale_reloads", "Files reloaded because they changed on disk."},
	{"dlshim_cache_alloc_failures_total", "counter", "alloc_failures", "Loads that found no room in the cache."},
	{"dlshim_cache_spare_refused_total", "counter", "spare_refused", "Loads ahead not done: only items still needed could have been evicted."},
	{"dlshim_cache_waste_bytes_total", "counter", "waste_bytes", "Bytes loaded, then evicted while a live job still needed them."},
	{"dlshim_cache_chunk_files", "gauge", "chunk_files", "Files per physical chunk in redirect modes."},
};

static const struct metric job_metrics[] = {
	{"dlshim_job_live", "gauge", "live", "1 while the job has processes connected, 0 once it ended."},
	{"dlshim_job_sessions", "gauge", "sessions", "Processes of the job connected to the coordinator."},
	{"dlshim_job_requests_total", "counter", "requests", "Routed opens."},
	{"dlshim_job_hits_total", "counter", "hits", "Routed opens served by a resident file."},
	{"dlshim_job_misses_total", "counter", "misses", "Routed opens that loaded the file."},
	{"dlshim_job_waits_total", "counter", "waits", "Routed opens that waited for a load in progress."},
	{"dlshim_job_passthrough_total", "counter", "passthrough", "Routed opens passed through (file unknown or no room to load it)."},
	{"dlshim_job_bytes_from_cache_total", "counter", "bytes_from_cache", "Bytes copied out of the cache."},
	{"dlshim_job_bytes_from_disk_total", "counter", "bytes_from_disk", "Bytes loaded from storage for the job."},
	{"dlshim_job_bytes_passthrough_total", "counter", "bytes_passthrough", "Bytes read directly from storage."},
	{"dlshim_job_epochs", "gauge", "epochs", "Epochs the job has completed (engine counter)."},
	{"dlshim_job_files_loaded_total", "counter", "files_loaded", "Files loaded from storage by the job."},
	{"dlshim_job_evictions_total", "counter", "evictions", "Evictions made to make room for the job's loads."},
	{"dlshim_job_redirects_total", "counter", "redirects", "Requests served by another file (redirect modes)."},
	{"dlshim_job_chunk_loads_total", "counter", "chunk_loads", "Physical chunks loaded (redirect modes)."},
	{"dlshim_job_loads_ahead_total", "counter", "loads_ahead", "Chunks loaded ahead of demand."},
	{"dlshim_job_bytes_consumed_total", "counter", "bytes_consumed", "Bytes of the files the job was served."},
	{"dlshim_job_row_index_hits_total", "counter", "row_index_hits", "HDF5 row reads served through the shared index without a request."},
	{"dlshim_job_redecided_total", "counter", "redecided", "Redirect decisions made again because the served file could not be delivered."},
	{"dlshim_job_claims_refused_total", "counter", "claims_refused", "Decisions of a job spanning nodes whose file another node of the job had taken (decided again)."},
	{"dlshim_job_io_efficiency", "gauge", "io_efficiency", "Bytes consumed / bytes loaded from storage (0 if none)."},
};

static const struct metric epoch_metrics[] = {
	{"dlshim_job_epoch_complete", "gauge", "complete", "1 once the epoch is over, 0 while it runs."},
	{"dlshim_job_epoch_requests_total", "counter", "requests", "Routed opens in the epoch."},
	{"dlshim_job_epoch_redirects_total", "counter", "redirects", "Redirected requests in the epoch."},
	{"dlshim_job_epoch_chunk_loads_total", "counter", "chunk_loads", "Physical chunks loaded in the epoch."},
	{"dlshim_job_epoch_bytes_from_disk_total", "counter", "bytes_from_disk", "Bytes loaded from storage in the epoch."},
	{"dlshim_job_epoch_bytes_consumed_total", "counter", "bytes_consumed", "Bytes served in the epoch."},
	{"dlshim_job_epoch_waste_bytes_total", "counter", "waste_bytes", "Cache-wide waste bytes during the epoch."},
	{"dlshim_job_epoch_io_efficiency", "gauge", "io_efficiency", "Bytes consumed / bytes from storage in the epoch."},
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static void prom_head(const struct metric *m)
{
	printf("# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, m->type);
}

/* A label value with \, " and newline escaped. */
static void prom_label(const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			printf("\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", stdout);
		else
			putchar(*s);
	}
}

/* Print the value of obj.key (numbers as sent: 64-bit counters stay exact). */
static int prom_value(const struct jdoc *d, int obj, const char *key)
{
	int i = jget(d, obj, key);
	if (i < 0)
		return -1;
	if (d->n[i].t == J_NUM)
		printf(" %.*s\n", (int)d->n[i].slen, d->n[i].s);
	else if (d->n[i].t == J_BOOL)
		printf(" %d\n", d->n[i].b);
	else
		return -1;
	return 0;
}

static void prom_simple(const struct jdoc *d, int obj, const struct metric *m, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		if (jget(d, obj, m[k].key) < 0)
			continue;
		prom_head(&m[k]);
		fputs(m[k].name, stdout);
		prom_value(d, obj, m[k].key);
	}
}

static int stats_prometheus(const struct jdoc *d)
{
	static const struct metric up = {"dlshim_coordinator_up", "gauge", NULL,
					 "1 if the coordinator answered, 0 if it is not running."};
	prom_head(&up);
	if (d == NULL) {
		printf("dlshim_coordinator_up 0\n");
		return 3;
	}
	printf("dlshim_coordinator_up 1\n");
	prom_simple(d, jget(d, 0, "daemon"), daemon_metrics, NELEM(daemon_metrics));
	prom_simple(d, jget(d, 0, "cache"), cache_metrics, NELEM(cache_metrics));
	int jobs = jget(d, 0, "jobs");
	if (jobs < 0 || d->n[jobs].t != J_ARR)
		return 0;
	for (size_t k = 0; k < NELEM(job_metrics); k++) {
		prom_head(&job_metrics[k]);
		for (int j = d->n[jobs].child; j >= 0; j = d->n[j].next) {
			if (!jcomplete(d, j))
				continue;
			const char *name = jstr(d, j, "job");
			if (name == NULL || jget(d, j, job_metrics[k].key) < 0)
				continue;
			printf("%s{job=\"", job_metrics[k].name);
			prom_label(name);
			putchar('"');
			putchar('}');
			prom_value(d, j, job_metrics[k].key);
		}
	}
	for (size_t k = 0; k < NELEM(epoch_metrics); k++) {
		prom_head(&epoch_metrics[k]);
		for (int j = d->n[jobs].child; j >= 0; j = d->n[j].next) {
			if (!jcomplete(d, j))
				continue;
			const char *name = jstr(d, j, "job");
			int pe = jget(d, j, "per_epoch");
			if (name == NULL || pe < 0 || d->n[pe].t != J_ARR)
				continue;
			for (int e = d->n[pe].child; e >= 0; e = d->n[e].next) {
				if (!jcomplete(d, e))
					continue;
				int ep = jget(d, e, "epoch");
				if (ep < 0 || d->n[ep].t != J_NUM || jget(d, e, epoch_metrics[k].key) < 0)
					continue;
				printf("%s{job=\"", epoch_metrics[k].name);
				prom_label(name);
				printf("\",epoch=\"%.*s\"}", (int)d->n[ep].slen, d->n[ep].s);
				prom_value(d, e, epoch_metrics[k].key);
			}
		}
	}
	return 0;
}

static int cmd_stats(int argc, char **argv)
{
	int json = 0, prom = 0, epochs = 0;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--prometheus") == 0)
			prom = 1;
		else if (strcmp(argv[i], "--epochs") == 0)
			epochs = 1;
		else if (strcmp(argv[i], "--from") == 0 && i + 1 < argc)
			saved_path = argv[++i];
		else {
			fprintf(stderr, "dlshim: stats: unknown option '%s'\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (json + prom > 1) {
		fprintf(stderr, "dlshim: stats: --json and --prometheus exclude each other\n");
		return 2;
	}
	if (json && saved_path) {
		fprintf(stderr, "dlshim: stats: --from formats a saved --json output; it needs no --json\n");
		return 2;
	}
	if (json) {
		const char *j = fetch_json();
		if (j == NULL)
			return not_running();
		fputs(j, stdout);
		return 0;
	}
	struct jdoc d;
	int rc = fetch_doc(&d);
	if (rc == 3) {
		if (prom) {
			stats_prometheus(NULL);
			fflush(stdout);
		}
		return not_running();
	}
	if (rc != 0)
		return rc;
	rc = prom ? stats_prometheus(&d) : stats_human(&d, epochs);
	jfree(&d);
	return rc;
}

/* ---- top: rates from successive snapshots ---- */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The job object named `name` in a snapshot, or -1. */
static int find_job(const struct jdoc *d, const char *name)
{
	int jobs = jget(d, 0, "jobs");
	if (jobs < 0)
		return -1;
	for (int j = d->n[jobs].child; j >= 0; j = d->n[j].next) {
		if (!jcomplete(d, j))
			continue;
		const char *n = jstr(d, j, "job");
		if (n && strcmp(n, name) == 0)
			return j;
	}
	return -1;
}

/* Counter delta of job field `key` between snapshots (prev job -1: since zero). */
static double delta(const struct jdoc *prev, int pj, const struct jdoc *cur, int cj, const char *key)
{
	double b = jnum0(cur, cj, key), a = pj >= 0 ? jnum0(prev, pj, key) : 0;
	return b >= a ? b - a : b; /* counters only grow; a reset starts over */
}

static void top_frame(const struct jdoc *prev, const struct jdoc *cur, double dt, int frame, double interval)
{
	int dm = jget(cur, 0, "daemon"), cache = jget(cur, 0, "cache"), jobs = jget(cur, 0, "jobs");
	/* a different coordinator (restart) means no common baseline */
	if (prev && jnum0(prev, jget(prev, 0, "daemon"), "pid") != jnum0(cur, dm, "pid"))
		prev = NULL;
	char used[32], cap[32], clock[16];
	human_bytes(jnum0(cur, cache, "used_bytes"), used, sizeof(used));
	human_bytes(jnum0(cur, cache, "capacity_bytes"), cap, sizeof(cap));
	time_t t = time(NULL);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
	printf("dlshim top  %s  frame %d  interval %.1f s  coordinator pid %.0f, up %.0f s, %.0f processes\n", clock,
	       frame, interval, jnum0(cur, dm, "pid"), jnum0(cur, dm, "uptime_s"), jnum0(cur, dm, "sessions"));
	printf("cache: %s used of %s, %.0f files resident, %.0f evictions\n\n", used, cap,
	       jnum0(cur, cache, "items_resident"), jnum0(cur, cache, "evictions"));
	int w = name_width(cur);
	printf("%-*s %5s %9s %8s %11s %11s %11s %6s\n", w, "job", "live", "opens/s", "hit rate", "cache MB/s",
	       "disk MB/s", "redirects/s", "epoch");
	int shown = 0, idle = 0;
	if (jobs >= 0) {
		for (int j = cur->n[jobs].child; j >= 0; j = cur->n[j].next) {
			if (!jcomplete(cur, j))
				continue;
			const char *name = jstr(cur, j, "job");
			if (name == NULL)
				continue;
			int pj = prev ? find_job(prev, name) : -1;
			const struct jdoc *pd = pj >= 0 ? prev : cur;
			double req = delta(pd, pj, cur, j, "requests"), hits = delta(pd, pj, cur, j, "hits");
			int live = jnum0(cur, j, "live") != 0;
			if (!live && req == 0) {
				idle++;
				continue;
			}
			char rate[16];
			if (req > 0)
				snprintf(rate, sizeof(rate), "%.1f%%", 100.0 * hits / req);
			else
				snprintf(rate, sizeof(rate), "-");
			printf("%-*s %5s %9.1f %8s %11.2f %11.2f %11.1f %6.0f\n", w, name, live ? "yes" : "no", req / dt, rate,
			       delta(pd, pj, cur, j, "bytes_from_cache") / dt / 1e6,
			       delta(pd, pj, cur, j, "bytes_from_disk") / dt / 1e6,
			       delta(pd, pj, cur, j, "redirects") / dt, jnum0(cur, j, "epochs"));
			shown++;
		}
	}
	if (shown == 0)
		printf("(no active job)\n");
	if (idle)
		printf("(%d ended job%s not shown)\n", idle, idle == 1 ? "" : "s");
}

static int cmd_top(int argc, char **argv)
{
	double interval = 2.0;
	long count = 0;
	for (int i = 0; i < argc; i++) {
		const char *v = NULL;
		int is_iv = strcmp(argv[i], "--interval") == 0 || strcmp(argv[i], "-i") == 0;
		int is_cnt = strcmp(argv[i], "--count") == 0 || strcmp(argv[i], "-n") == 0;
		if ((is_iv || is_cnt) && i + 1 < argc)
			v = argv[++i];
		else if (strncmp(argv[i], "--interval=", 11) == 0)
			v = argv[i] + 11, is_iv = 1;
		else if (strncmp(argv[i], "--count=", 8) == 0)
			v = argv[i] + 8, is_cnt = 1;
		char *end = NULL;
		if (v && is_iv) {
			interval = strtod(v, &end);
			if (*v && *end == 0 && interval >= 0.05 && interval <= 86400)
				continue;
		} else if (v && is_cnt) {
			errno = 0;
			count = strtol(v, &end, 10);
			if (*v && *end == 0 && errno == 0 && count >= 0)
				continue;
		}
		fprintf(stderr, "dlshim: top: bad argument '%s' (--interval SECONDS >= 0.05, --count N >= 0)\n",
			argv[i]);
		return 2;
	}
	int tty = isatty(STDOUT_FILENO);
	struct jdoc prev, cur;
	int rc = fetch_doc(&prev);
	if (rc == 3)
		return not_running();
	if (rc != 0)
		return rc;
	int have_prev = 1;
	double t_prev = now_s();
	for (long frame = 1; count == 0 || frame <= count; frame++) {
		sleep_s(interval);
		rc = fetch_doc(&cur);
		double t = now_s();
		if (tty)
			fputs("\033[H\033[2J", stdout);
		else if (frame > 1)
			putchar('\n');
		if (rc != 0) {
			printf("dlshim top  frame %ld  %s (runtime dir %s)\n", frame,
			       rc == 3 ? "coordinator not running" : "unreadable stats", cfg.runtime_dir);
		} else {
			top_frame(have_prev ? &prev : NULL, &cur, t - t_prev, (int)frame, interval);
		}
		fflush(stdout);
		if (have_prev)
			jfree(&prev);
		have_prev = rc == 0;
		if (have_prev)
			prev = cur;
		t_prev = t;
	}
	if (have_prev)
		jfree(&prev);
	return 0;
}

static int cmd_stop(void)
{
	int fd = control_session();
	if (fd < 0) {
		printf("dlshim coordinator: not running\n");
		return 0;
	}
	long n = request(fd, DLSHIM_MSG_STOP, NULL, 0, DLSHIM_MSG_TEXT);
	close(fd);
	/* Wait until it no longer answers, so a following start is clean. */
	for (int i = 0; i < 100; i++) {
		int f = connect_control();
		if (f < 0)
			break;
		close(f);
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	printf("dlshim coordinator: %s\n", n < 0 ? "stop request failed" : "stopped");
	return n < 0 ? 1 : 0;
}

static int cmd_run(int argc, char **argv)
{
	if (argc > 0 && strcmp(argv[0], "--") == 0) {
		argc--;
		argv++;
	}
	if (argc == 0) {
		usage(stderr);
		return 2;
	}
	/* The library lives next to this binary (build tree) or in ../lib. */
	char self[PATH_MAX], lib[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = 0;
	*strrchr(self, '/') = 0;
	snprintf(lib, sizeof(lib), "%s/libdlshim.so", self);
	if (access(lib, R_OK) != 0)
		snprintf(lib, sizeof(lib), "%s/../lib/libdlshim.so", self);
	char *resolved = realpath(lib, NULL);
	if (resolved == NULL) {
		fprintf(stderr, "dlshim: cannot find libdlshim.so next to %s\n", self);
		return 1;
	}
	const char *old = getenv("LD_PRELOAD");
	char *val = malloc(strlen(resolved) + (old ? strlen(old) : 0) + 2);
	if (val == NULL)
		return 1;
	sprintf(val, "%s%s%s", resolved, old && *old ? ":" : "", old ? old : "");
	setenv("LD_PRELOAD", val, 1);
	if (getenv("DLSHIM_ROOTS") == NULL)
		fprintf(stderr, "dlshim: DLSHIM_ROOTS is not set: nothing will be routed\n");
	execvp(argv[0], argv);
	fprintf(stderr, "dlshim: cannot run %s: %s\n", argv[0], strerror(errno));
	return 127;
}

int main(int argc, char **argv)
{
	char err[512];
	if (dlshim_config_parse(&cfg, env_get, 0, err, sizeof(err)) < 0) {
		fprintf(stderr, "dlshim: %s\n", err);
		return 2;
	}
	if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "status") == 0)
		return cmd_status();
	if (strcmp(argv[1], "stats") == 0)
		return cmd_stats(argc - 2, argv + 2);
	if (strcmp(argv[1], "top") == 0)
		return cmd_top(argc - 2, argv + 2);
	if (strcmp(argv[1], "stop") == 0)
		return cmd_stop();
	if (strcmp(argv[1], "run") == 0)
		return cmd_run(argc - 2, argv + 2);
	fprintf(stderr, "dlshim: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
