/* One record per (job, group): its epoch and the files consumed in it, an
 * open-addressing set of path hashes (16 bytes a file, at most half full)
 * and the same files in the order they were taken (12 bytes a file, for
 * telling each node what the others took since it last asked), emptied
 * when the epoch turns. Records are never removed: they live as long as
 * the coordinator (a group costs its files' set once per job). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "claim_table.h"

struct fent {
	uint64_t file;  /* 0 = empty */
	uint32_t node, pad;
};

struct grec {
	uint64_t key;
	uint32_t epoch, count;
	struct fent *v;
	size_t cap;     /* power of two */
	uint64_t *log;  /* count files, in the order taken */
	uint32_t *log_node;
	size_t log_cap;
	uint32_t cursor[CLAIM_MAX_NODES]; /* log entries each node was told of */
	UT_hash_handle hh;
};

struct claim_table {
	pthread_mutex_t mu;
	struct grec *groups;
	size_t n;
};

struct claim_table *claim_table_new(void)
{
	struct claim_table *t = calloc(1, sizeof(*t));
	if (t == NULL)
		return NULL;
	pthread_mutex_init(&t->mu, NULL);
	return t;
}

void claim_table_free(struct claim_table *t)
{
	if (t == NULL)
		return;
	struct grec *g, *tmp;
	HASH_ITER(hh, t->groups, g, tmp) {
		HASH_DEL(t->groups, g);
		free(g->v);
		free(g->log);
		free(g->log_node);
		free(g);
	}
	pthread_mutex_destroy(&t->mu);
	free(t);
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	return x ^ (x >> 33);
}

static struct fent *find(struct fent *v, size_t cap, uint64_t file)
{
	for (size_t i = mix(file) & (cap - 1);; i = (i + 1) & (cap - 1))
		if (v[i].file == file || v[i].file == 0)
			return &v[i];
}

static int grow(struct grec *g)
{
	size_t cap = g->cap ? g->cap * 2 : 64;
	struct fent *v = calloc(cap, sizeof(*v));
	if (v == NULL)
		return -1;
	for (size_t i = 0; i < g->cap; i++)
		if (g->v[i].file)
			*find(v, cap, g->v[i].file) = g->v[i];
	free(g->v);
	g->v = v;
	g->cap = cap;
	return 0;
}

static int grow_log(struct grec *g)
{
	size_t cap = g->log_cap ? g->log_cap * 2 : 64;
	uint64_t *l = realloc(g->log, cap * sizeof(*l));
	if (l == NULL)
		return -1;
	g->log = l;
	uint32_t *n = realloc(g->log_node, cap * sizeof(*n));
	if (n == NULL)
		return -1;
	g->log_node = n;
	g->log_cap = cap;
	return 0;
}

static void next_epoch(struct grec *g, uint32_t epoch)
{
	g->epoch = epoch;
	g->count = 0;
	memset(g->cursor, 0, sizeof(g->cursor));
	if (g->v)
		memset(g->v, 0, g->cap * sizeof(*g->v));
}

/* Files other nodes took since `node` was last told (called before the
 * epoch may turn, so they belong to the epoch answered about). */
static void tell(struct grec *g, uint32_t node, struct claim_sync *sync)
{
	if (sync == NULL)
		return;
	sync->n = 0;
	uint32_t *c = &g->cursor[node];
	for (; *c < g->count && sync->n < sync->max; (*c)++)
		if (g->log_node[*c] != node)
			sync->file[sync->n++] = g->log[*c];
}

/* The record of (job, group), made at `epoch` if new, moved to `epoch` if
 * behind it. Called with t->mu. */
static struct grec *record(struct claim_table *t, uint64_t job, uint64_t group, uint32_t epoch)
{
	uint64_t key = mix(job) ^ group;
	struct grec *g;
	HASH_FIND(hh, t->groups, &key, sizeof(key), g);
	if (g == NULL) {
		g = calloc(1, sizeof(*g));
		if (g == NULL)
			return NULL;
		g->key = key;
		g->epoch = epoch;
		HASH_ADD(hh, t->groups, key, sizeof(g->key), g);
		t->n++;
	} else if (epoch > g->epoch) {
		next_epoch(g, epoch);
	}
	return g;
}

/* The record a request is about, with t->mu held (NULL, unlocked, on a
 * bad node index or no memory). */
static struct grec *enter(struct claim_table *t, uint64_t job, uint64_t group, uint32_t epoch, uint32_t node,
			  struct claim_sync *sync)
{
	if (sync)
		sync->n = 0;
	if (node >= CLAIM_MAX_NODES)
		return NULL;
	pthread_mutex_lock(&t->mu);
	struct grec *g = record(t, job, group, epoch);
	if (g == NULL)
		pthread_mutex_unlock(&t->mu);
	return g;
}

int claim_table_claim(struct claim_table *t, uint64_t job, uint64_t group, uint64_t file, uint32_t size,
		      uint32_t epoch, uint32_t node, uint32_t *at, struct claim_sync *sync)
{
	if (file == 0)
		file = 1; /* 0 marks an empty entry */
	*at = epoch;
	struct grec *g = enter(t, job, group, epoch, node, sync);
	if (g == NULL)
		return -1;
	if (((g->count + 1) * 2 > g->cap && grow(g) < 0) || (g->count == g->log_cap && grow_log(g) < 0)) {
		pthread_mutex_unlock(&t->mu);
		return -1;
	}
	*at = g->epoch;
	struct fent *f = find(g->v, g->cap, file);
	int granted = 1;
	if (f->file) {
		granted = f->node == node;
	} else {
		*f = (struct fent){file, node, 0};
		g->log[g->count] = file;
		g->log_node[g->count++] = node;
	}
	tell(g, node, sync);
	if (g->count >= size)
		next_epoch(g, g->epoch + 1);
	pthread_mutex_unlock(&t->mu);
	return granted;
}

int claim_table_current(struct claim_table *t, uint64_t job, uint64_t group, uint32_t epoch, uint32_t node,
			uint32_t *at, struct claim_sync *sync)
{
	*at = epoch;
	struct grec *g = enter(t, job, group, epoch, node, sync);
	if (g == NULL)
		return -1;
	*at = g->epoch;
	tell(g, node, sync);
	pthread_mutex_unlock(&t->mu);
	return *at == epoch;
}

size_t claim_table_count(struct claim_table *t)
{
	pthread_mutex_lock(&t->mu);
	size_t n = t->n;
	pthread_mutex_unlock(&t->mu);
	return n;
}
