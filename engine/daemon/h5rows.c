/* The coordinator's side of HDF5 row caching: plan a dataset's row chunks
 * (whole HDF5 chunks, aggregated to a few hundred KiB), pick the row to
 * serve (include/dlshim/rows.h), and load a row chunk with one H5Dread of
 * consecutive rows. The serial HDF5 library is not thread-safe: every
 * HDF5 call holds h5_mu. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "dlshim/rows.h"
#include "dlshim/shm.h"
#include "h5rows.h"

#define PLANS 64
#define AGG_BYTES (512u * 1024u) /* default bytes per row chunk: large reads, little waste */

struct plan {
	uint64_t dev, ino, size, chunk;
	int64_t mtime_ns;
	uint64_t dset_hash, nrows, row_bytes, chunk_rows;
	uint32_t redirect;
	int ok;                   /* 0: this dataset passes through */
	int used;
	uint64_t stamp;
};

static pthread_mutex_t h5_mu = PTHREAD_MUTEX_INITIALIZER;
/* The plans have their own lock: a request must not wait for a chunk
 * load's H5Dread (under h5_mu) just to look its plan up. Order: plan_mu,
 * then h5_mu, then D.mu. */
static pthread_mutex_t plan_mu = PTHREAD_MUTEX_INITIALIZER;
static struct plan plans[PLANS]; /* under plan_mu */
static uint64_t plan_clock;
static struct dlshim_rows *rows; /* under D.mu */

/* How the coordinator opens files: without HDF5's file lock where the
 * library can, so that the files it keeps open for loads never stop a
 * program from rewriting them (a changed file fails our identity checks,
 * and its clients read it themselves); without that, files are closed
 * after every load (KEEP_OPEN 0). And without data sieving: HDF5 reads a
 * contiguous dataset's small selections through a 64 KiB sieve buffer,
 * so every 16 KiB row chunk of an exact-mode miss read 64 KiB from the
 * device; a row chunk is read once, whole, and has no use for it. */
#if H5_VERSION_GE(1, 10, 7)
#define KEEP_OPEN 1
#else
#define KEEP_OPEN 0
#endif
static hid_t fapl = H5P_DEFAULT;

static void h5_init_locked(void)
{
	static int done;
	if (!done) {
		H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* failures are reported by dlog, not HDF5's stack dump */
		hid_t p = H5Pcreate(H5P_FILE_ACCESS);
		if (p >= 0 && H5Pset_sieve_buf_size(p, 0) >= 0
#if KEEP_OPEN
		    && H5Pset_file_locking(p, 0, 1) >= 0
#endif
		)
			fapl = p;
		else if (p >= 0)
			H5Pclose(p);
		done = 1;
	}
}

static void handles_drop_other_versions(const struct dlshim_msg_rows *m);

/* Open the file read-only and check it is the client's file version. */
static hid_t open_checked(const char *path, const struct dlshim_msg_rows *m)
{
	/* HDF5 shares one open file's state (and metadata cache) between
	 * opens of the same inode: an older version must be closed first. */
	handles_drop_other_versions(m);
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
	if (f < 0)
		return -1;
	int *fdp = NULL;
	struct stat st;
	if (H5Fget_vfd_handle(f, H5P_DEFAULT, (void **)&fdp) < 0 || fdp == NULL || fstat(*fdp, &st) < 0 ||
	    (uint64_t)st.st_dev != m->dev || (uint64_t)st.st_ino != m->ino || (uint64_t)st.st_size != m->size ||
	    (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec != m->mtime_ns) {
		H5Fclose(f);
		return -1;
	}
	return f;
}

/* Is the dataset one whose rows we can read exactly as the client would,
 * and how many rows go in one cache item? */
static int plan_dataset(hid_t d, const struct dlshim_msg_rows *m, uint64_t cache_bytes, uint64_t *chunk_rows)
{
	int ok = 0;
	hid_t sp = H5Dget_space(d), t = H5Dget_type(d), dc = H5Dget_create_plist(d);
	hsize_t dims[H5S_MAX_RANK], cd[H5S_MAX_RANK];
	int nd = sp >= 0 ? H5Sget_simple_extent_dims(sp, dims, NULL) : -1;
	if (nd < 1 || t < 0 || dc < 0)
		goto out;
	H5T_class_t cls = H5Tget_class(t);
	if (cls != H5T_INTEGER && cls != H5T_FLOAT)
		goto out;
	uint64_t rb = H5Tget_size(t);
	for (int i = 1; i < nd; i++)
		rb *= dims[i];
	H5D_layout_t lay = H5Pget_layout(dc);
	if (dims[0] != m->nrows || rb != m->row_bytes || rb == 0 || lay == H5D_VIRTUAL || lay < 0 ||
	    H5Pget_external_count(dc) != 0)
		goto out;
	uint64_t c0 = 1;
	if (lay == H5D_CHUNKED && H5Pget_chunk(dc, nd, cd) == nd && cd[0] > 0)
		c0 = cd[0];
	/* Aggregate when every loaded row gets used: redirect serves the rows
	 * of a loaded chunk, and a dataset that fits the cache is read again.
	 * Exact random reads of a larger dataset would load mostly rows that
	 * are evicted unread: there a row chunk is one HDF5 chunk (what HDF5
	 * reads anyway) or one cache block of contiguous rows. A row chunk
	 * stays a small part of the cache, so several datasets fit together. */
	int aggregate = m->redirect == DLSHIM_REDIRECT_ANY || m->nrows * rb <= cache_bytes / 2;
	uint64_t agg = aggregate ? (cache_bytes / 32 < AGG_BYTES ? cache_bytes / 32 : AGG_BYTES) : DLSHIM_BLOCK_SIZE;
	uint64_t want = m->chunk ? m->chunk : (agg + rb - 1) / rb;
	if (!aggregate && !m->chunk && c0 == 1)
		want = DLSHIM_BLOCK_SIZE / rb; /* whole rows within one block; 0 -> one row below */
	if (want == 0)
		want = 1;
	uint64_t k = (want + c0 - 1) / c0 * c0; /* whole HDF5 chunks: each is read and decoded once */
	*chunk_rows = k < m->nrows ? k : m->nrows;
	ok = 1;
out:
	if (sp >= 0)
		H5Sclose(sp);
	if (t >= 0)
		H5Tclose(t);
	if (dc >= 0)
		H5Pclose(dc);
	return ok;
}

static int get_plan(const struct dlshim_msg_rows *m, const char *path, const char *dset, struct plan *out)
{
	uint64_t dh = dlshim_rows_name_hash(dset);
	pthread_mutex_lock(&plan_mu);
	struct plan *p = NULL, *old = &plans[0];
	for (int i = 0; i < PLANS; i++) {
		struct plan *q = &plans[i];
		if (q->used && q->dev == m->dev && q->ino == m->ino && q->size == m->size && q->mtime_ns == m->mtime_ns &&
		    q->dset_hash == dh && q->nrows == m->nrows && q->row_bytes == m->row_bytes && q->chunk == m->chunk &&
		    q->redirect == m->redirect) {
			p = q;
			break;
		}
		if (!q->used || q->stamp < old->stamp)
			old = q;
	}
	if (p == NULL) {
		pthread_mutex_lock(&h5_mu);
		h5_init_locked();
		p = old;
		memset(p, 0, sizeof(*p));
		hid_t f = open_checked(path, m);
		if (f < 0) {
			pthread_mutex_unlock(&h5_mu);
			pthread_mutex_unlock(&plan_mu);
			return 0; /* not cached: the file may be changing */
		}
		hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
		struct dlshim_cache_stats cs;
		pthread_mutex_lock(&D.mu);
		dlshim_engine_cache_stats(D.eng, &cs);
		pthread_mutex_unlock(&D.mu);
		p->ok = d >= 0 && plan_dataset(d, m, cs.capacity_bytes, &p->chunk_rows);
		if (d >= 0)
			H5Dclose(d);
		H5Fclose(f);
		pthread_mutex_unlock(&h5_mu);
		p->dev = m->dev, p->ino = m->ino, p->size = m->size, p->mtime_ns = m->mtime_ns;
		p->dset_hash = dh, p->nrows = m->nrows, p->row_bytes = m->row_bytes, p->chunk = m->chunk;
		p->redirect = m->redirect;
		p->used = 1;
		if (!p->ok)
			dlog(DLSHIM_LOG_INFO, "%s:%s: rows pass through (layout or type not cached)", path, dset);
	}
	p->stamp = ++plan_clock;
	*out = *p;
	pthread_mutex_unlock(&plan_mu);
	return out->ok;
}

/* Files the coordinator keeps open for row loads, with their datasets:
 * opening the file and the dataset for every row chunk cost more than
 * the read itself (HDF5 reads the superblock and object headers again,
 * from the device when the page cache is short), and exact-mode misses
 * load a small chunk each. A handle is for one file version (dev, ino,
 * size, mtime) and is checked against its descriptor at every use: a
 * file changed in place fails the check and is closed (the load fails and
 * the client reads the rows itself, as when open_checked refuses). Under
 * h5_mu. */
#define HANDLES 8
#define HANDLE_DSETS 8

struct h5handle {
	int used;
	uint64_t dev, ino, size, stamp;
	int64_t mtime_ns;
	hid_t f;
	int fd;                   /* HDF5's descriptor (sec2), for the check */
	int nds;
	struct {
		uint64_t hash;
		hid_t d, space, type;
	} ds[HANDLE_DSETS];
};

static struct h5handle handles[HANDLES];
static uint64_t handle_clock;

/* Still the version the handle was opened for? */
static int handle_same(const struct h5handle *h)
{
	struct stat st;
	return fstat(h->fd, &st) == 0 && (uint64_t)st.st_size == h->size &&
	       (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec == h->mtime_ns;
}

static void handle_close(struct h5handle *h)
{
	for (int i = 0; i < h->nds; i++) {
		H5Sclose(h->ds[i].space);
		H5Tclose(h->ds[i].type);
		H5Dclose(h->ds[i].d);
	}
	H5Fclose(h->f);
	memset(h, 0, sizeof(*h));
}

static void handles_drop_other_versions(const struct dlshim_msg_rows *m)
{
	for (int i = 0; i < HANDLES; i++) {
		struct h5handle *h = &handles[i];
		if (h->used && h->dev == m->dev && h->ino == m->ino && (h->size != m->size || h->mtime_ns != m->mtime_ns))
			handle_close(h);
	}
}

/* The open file for the client's version of `path`, or NULL. */
static struct h5handle *handle_get(const char *path, const struct dlshim_msg_rows *m)
{
	struct h5handle *h = NULL, *old = &handles[0];
	for (int i = 0; i < HANDLES && h == NULL; i++) {
		struct h5handle *q = &handles[i];
		if (q->used && q->dev == m->dev && q->ino == m->ino && q->size == m->size && q->mtime_ns == m->mtime_ns)
			h = q;
		else if (!q->used || (old->used && q->stamp < old->stamp))
			old = q;
	}
	if (h) {
		if (handle_same(h)) {
			h->stamp = ++handle_clock;
			return h;
		}
		handle_close(h); /* changed in place since */
		return NULL;
	}
	hid_t f = open_checked(path, m);
	if (f < 0)
		return NULL;
	void *vfd = NULL;
	if (H5Fget_vfd_handle(f, H5P_DEFAULT, &vfd) < 0 || vfd == NULL) {
		H5Fclose(f);
		return NULL;
	}
	/* A row chunk is one read at a random place: kernel read-ahead around
	 * it would only bring in bytes of rows nobody asked for yet (in
	 * bench-hdf5 with 64 KB rows, 300 MB of 940 MB read from the device). */
	posix_fadvise(*(int *)vfd, 0, 0, POSIX_FADV_RANDOM);
	if (old->used)
		handle_close(old);
	old->used = 1;
	old->dev = m->dev, old->ino = m->ino, old->size = m->size, old->mtime_ns = m->mtime_ns;
	old->f = f;
	old->fd = *(int *)vfd;
	old->stamp = ++handle_clock;
	return old;
}

/* Dataset `dset` of the open file: its id, a file space and its type. */
static int handle_dataset(struct h5handle *h, const char *dset, hid_t *d, hid_t *fs, hid_t *t)
{
	uint64_t hash = dlshim_rows_name_hash(dset);
	int i = 0;
	while (i < h->nds && h->ds[i].hash != hash)
		i++;
	if (i == h->nds) {
		if (h->nds == HANDLE_DSETS) { /* make room: the first opened goes */
			H5Sclose(h->ds[0].space);
			H5Tclose(h->ds[0].type);
			H5Dclose(h->ds[0].d);
			memmove(&h->ds[0], &h->ds[1], sizeof(h->ds[0]) * (HANDLE_DSETS - 1));
			h->nds--;
			i = h->nds;
		}
		hid_t nd = H5Dopen2(h->f, dset, H5P_DEFAULT), ns = -1, nt = -1;
		if (nd < 0 || (ns = H5Dget_space(nd)) < 0 || (nt = H5Dget_type(nd)) < 0) {
			if (ns >= 0)
				H5Sclose(ns);
			if (nd >= 0)
				H5Dclose(nd);
			return -1;
		}
		h->ds[i].hash = hash;
		h->ds[i].d = nd;
		h->ds[i].space = ns;
		h->ds[i].type = nt;
		h->nds++;
	}
	*d = h->ds[i].d;
	*fs = h->ds[i].space;
	*t = h->ds[i].type;
	return 0;
}

/* Read rows [first, first + count) into the slot being loaded. */
static int load_rows(const char *path, const char *dset, const struct dlshim_msg_rows *m, uint64_t first,
		     uint64_t count, uint32_t slot)
{
	uint64_t bytes = count * m->row_bytes;
	uint8_t *buf = malloc(bytes ? bytes : 1);
	if (buf == NULL)
		return -1;
	int rc = -1;
	pthread_mutex_lock(&h5_mu);
	h5_init_locked();
	hid_t d, fs, t, ms = -1;
	struct h5handle *h = handle_get(path, m);
	if (h == NULL || handle_dataset(h, dset, &d, &fs, &t) < 0)
		goto out;
	hsize_t dims[H5S_MAX_RANK], start[H5S_MAX_RANK] = {0}, cnt[H5S_MAX_RANK];
	int nd = H5Sget_simple_extent_dims(fs, dims, NULL);
	if (nd < 1 || dims[0] != m->nrows)
		goto out;
	memcpy(cnt, dims, sizeof(hsize_t) * (size_t)nd);
	start[0] = first;
	cnt[0] = count;
	/* The dataset's own type in memory: no conversion, the bytes a client
	 * reading with an equal memory type gets. */
	if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL) < 0 ||
	    (ms = H5Screate_simple(nd, cnt, NULL)) < 0 || H5Dread(d, t, ms, fs, H5P_DEFAULT, buf) < 0)
		goto out;
	rc = handle_same(h) ? 0 : -1; /* not rewritten while we read */
out:
	if (ms >= 0)
		H5Sclose(ms);
	if (h && (!KEEP_OPEN || rc < 0))
		handle_close(h);
	pthread_mutex_unlock(&h5_mu);
	if (rc == 0) {
		/* Scatter into the slot's block chain (stable while we hold its load). */
		uint64_t off = 0;
		while (off < bytes) {
			struct iovec iov[16];
			int n = dlshim_engine_slot_iov(D.eng, slot, off, iov, 16);
			if (n <= 0) {
				rc = -1;
				break;
			}
			for (int i = 0; i < n && off < bytes; i++) {
				size_t l = iov[i].iov_len < bytes - off ? iov[i].iov_len : bytes - off;
				memcpy(iov[i].iov_base, buf + off, l);
				off += l;
			}
		}
	} else {
		dlog(DLSHIM_LOG_WARN, "%s:%s: cannot read rows %llu..%llu; clients read them themselves", path, dset,
		     (unsigned long long)first, (unsigned long long)(first + count));
	}
	free(buf);
	return rc;
}

struct resident_ctx {
	const struct dlshim_msg_rows *m;
	uint64_t dset_hash, k;
};

/* The file's dataset with the same row count and the finest row chunks
 * (largest rows): its residency decides which rows are cheap to serve,
 * whichever dataset (inputs or labels) asks first. */
static void primary(const struct plan *p, uint64_t *hash, uint64_t *k)
{
	*hash = p->dset_hash;
	*k = p->chunk_rows;
	pthread_mutex_lock(&plan_mu);
	for (int i = 0; i < PLANS; i++) {
		const struct plan *q = &plans[i];
		if (q->used && q->ok && q->dev == p->dev && q->ino == p->ino && q->mtime_ns == p->mtime_ns &&
		    q->nrows == p->nrows && q->chunk == p->chunk && q->redirect == p->redirect && q->chunk_rows < *k) {
			*hash = q->dset_hash;
			*k = q->chunk_rows;
		}
	}
	pthread_mutex_unlock(&plan_mu);
}

/* Called under D.mu by the row mapping. */
static int chunk_resident(void *ctx, uint64_t first, uint64_t n)
{
	(void)n;
	const struct resident_ctx *c = ctx;
	struct dlshim_file_id id;
	dlshim_rows_chunk_id(c->m->dev, c->m->ino, c->m->mtime_ns, c->dset_hash, c->k, first / c->k, 0, &id);
	uint32_t it = dlshim_engine_find_item(D.eng, id.dev, id.ino);
	return it != DLSHIM_NO_ITEM &&
	       (dlshim_engine_item_resident(D.eng, it) || dlshim_engine_item_loading(D.eng, it));
}

/* Called under D.mu by the row mappings: their holds are part of the
 * chunk item's RefCnt key. */
static int chunk_hold(void *ctx, int job, const struct dlshim_file_id *id, int how)
{
	(void)ctx;
	if (how < 0)
		dlshim_engine_item_spent(D.eng, job, id->dev, id->ino);
	return dlshim_engine_item_hold(D.eng, id->dev, id->ino, how > 0 ? 1 : -1);
}

/* Open row chunk [first, first + count) for `job`, loading it (or waiting
 * for its load) as needed. Called and returns with D.mu held; res->kind is
 * HIT (pinned) or PASS. A redirect job's chunks are needed by its
 * mappings' holds (DLSHIM_OPEN_F_HELD), not by opens; a chunk new to the
 * cache is held by the mappings that need it before anything can evict
 * it. `k`: rows per chunk of the dataset. */
static void open_chunk(int job, const struct dlshim_msg_rows *m, const char *path, const char *dset,
		       const struct dlshim_file_id *id, uint64_t first, uint64_t count, uint64_t k, unsigned flags,
		       struct dlshim_open_result *res)
{
	if (m->redirect == DLSHIM_REDIRECT_ANY)
		flags |= DLSHIM_OPEN_F_HELD;
	daemon_engine_open(job, id, flags, res);
	if (res->kind == DLSHIM_OPEN_LOAD && (flags & DLSHIM_OPEN_F_HELD))
		dlshim_rows_chunk_cached(rows, m->dev, m->ino, m->nrows, m->mtime_ns, dlshim_rows_name_hash(dset), k,
					 first / k);
	if (res->kind == DLSHIM_OPEN_LOAD) {
		pthread_mutex_unlock(&D.mu);
		int ok = load_rows(path, dset, m, first, count, res->slot) == 0;
		pthread_mutex_lock(&D.mu);
		uint64_t gen = dlshim_engine_load_done(D.eng, job, res->item, ok);
		pthread_cond_broadcast(&D.loaded);
		res->kind = gen ? DLSHIM_OPEN_HIT : DLSHIM_OPEN_PASS;
		res->gen = gen;
	}
}

/* Load-ahead of one row chunk at a time (all jobs together): while the
 * workers consume a chunk, the next one is read, so a redirected read
 * rarely waits for storage. */
static atomic_int ahead_busy;

struct ahead {
	int job;
	struct dlshim_msg_rows m;
	uint64_t k;
	struct dlshim_file_id id;
	uint64_t first, count;
	char *path, *dset;
};

static void *ahead_main(void *arg)
{
	struct ahead *a = arg;
	struct dlshim_open_result res;
	pthread_mutex_lock(&D.mu);
	open_chunk(a->job, &a->m, a->path, a->dset, &a->id, a->first, a->count, a->k,
		   DLSHIM_OPEN_F_AHEAD | DLSHIM_OPEN_F_SPARE, &res);
	if (res.kind == DLSHIM_OPEN_HIT)
		dlshim_engine_release(D.eng, a->job, res.slot, res.gen, 0, 0); /* nothing copied */
	pthread_mutex_unlock(&D.mu);
	free(a->path);
	free(a->dset);
	free(a);
	atomic_store(&ahead_busy, 0);
	return NULL;
}

/* Called under D.mu. */
static void ahead_start(int job, const struct dlshim_msg_rows *m, const char *path, const char *dset,
			const struct plan *p, uint64_t chunk)
{
	if (atomic_exchange(&ahead_busy, 1))
		return;
	struct ahead *a = calloc(1, sizeof(*a));
	pthread_t t;
	pthread_attr_t at;
	if (a && (a->path = strdup(path)) && (a->dset = strdup(dset)) && pthread_attr_init(&at) == 0) {
		a->job = job;
		a->m = *m;
		a->k = p->chunk_rows;
		a->first = chunk * p->chunk_rows;
		a->count = m->nrows - a->first < p->chunk_rows ? m->nrows - a->first : p->chunk_rows;
		dlshim_rows_chunk_id(m->dev, m->ino, m->mtime_ns, p->dset_hash, p->chunk_rows, chunk,
				     a->count * m->row_bytes, &a->id);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		int rc = pthread_create(&t, &at, ahead_main, a);
		pthread_attr_destroy(&at);
		if (rc == 0)
			return;
	}
	if (a) {
		free(a->path);
		free(a->dset);
	}
	free(a);
	atomic_store(&ahead_busy, 0);
}

/* The connection's lease memory, created on first use. Called under D.mu. */
static int lease_get(struct h5rows_conn *hc)
{
	if (hc->l)
		return 0;
	size_t len = ((sizeof(struct dlshim_rows_lease_shm) + 4095) / 4096) * 4096;
	int fd = memfd_create("dlshim-lease", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)len) == 0)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return -1;
	}
	hc->l = dlshim_rows_lease_new(rows, p);
	if (hc->l == NULL) {
		munmap(p, len);
		close(fd);
		return -1;
	}
	hc->shm = p;
	hc->fd = fd;
	hc->sent = 0;
	return 0;
}

void h5rows_conn_end(struct h5rows_conn *hc)
{
	if (hc->l == NULL)
		return;
	pthread_mutex_lock(&D.mu);
	dlshim_rows_lease_free(rows, hc->l);
	pthread_mutex_unlock(&D.mu);
	munmap(hc->shm, ((sizeof(struct dlshim_rows_lease_shm) + 4095) / 4096) * 4096);
	close(hc->fd);
	memset(hc, 0, sizeof(*hc));
}

/* Rows per lease: half a row chunk (a worker's lease then covers what the
 * chunk load brings in for it), at least 8. */
static uint32_t lease_want(uint64_t k)
{
	uint64_t w = k / 2 < 8 ? 8 : k / 2;
	return w > DLSHIM_LEASE_ROWS ? DLSHIM_LEASE_ROWS : (uint32_t)w;
}

void h5rows_serve(int job, const struct dlshim_msg_rows *m, const char *path, const char *dset,
		  struct dlshim_msg_rows_r *r, struct h5rows_conn *hc, int *pass_fd)
{
	memset(r, 0, sizeof(*r));
	*pass_fd = -1;
	r->status = DLSHIM_OPEN_R_PASS;
	struct plan p;
	if (m->row >= m->nrows || !get_plan(m, path, dset, &p))
		return;
	uint64_t k = p.chunk_rows, served = m->row;
	struct resident_ctx rc = {m, p.dset_hash, k};
	int redirect = m->redirect == DLSHIM_REDIRECT_ANY && !(m->flags & DLSHIM_ROWS_F_LEASED);
	if (m->redirect == DLSHIM_REDIRECT_ANY)
		primary(&p, &rc.dset_hash, &rc.k);
	pthread_mutex_lock(&D.mu);
	if (rows == NULL && (rows = dlshim_rows_create()) != NULL)
		dlshim_rows_set_hold(rows, chunk_hold, NULL);
	const char *jn = dlshim_engine_job_name(D.eng, job);
	uint64_t jk = dlshim_rows_name_hash(jn ? jn : "");
	int64_t j = -1;
	if (redirect) {
		uint64_t e0 = dlshim_rows_epochs_started(rows);
		/* This dataset's chunks, and the primary's, are held while
		 * the epoch has rows of them to serve. */
		dlshim_rows_bind(rows, job, jk, m->dev, m->ino, m->nrows, m->mtime_ns, p.dset_hash, k);
		if (rc.dset_hash != p.dset_hash)
			dlshim_rows_bind(rows, job, jk, m->dev, m->ino, m->nrows, m->mtime_ns, rc.dset_hash, rc.k);
		j = dlshim_rows_map(rows, job, jk, m->dev, m->ino, m->nrows, p.dset_hash, m->row, rc.k, chunk_resident,
				    &rc);
		/* Published before any mapping of the new epoch leaves: clients
		 * drop the mappings they remember. */
		if (dlshim_rows_epochs_started(rows) != e0)
			dlshim_engine_rows_epoch_bump(D.eng);
		if (j >= 0)
			served = (uint64_t)j;
		/* Only the dataset whose residency steers the mapping reads ahead. */
		int64_t next = j >= 0 && rc.dset_hash == p.dset_hash
				       ? dlshim_rows_ahead(rows, job, jk, m->dev, m->ino, m->nrows, k, served,
							   chunk_resident, &rc)
				       : -1;
		if (next >= 0)
			ahead_start(job, m, path, dset, &p, (uint64_t)next);
	}
	uint64_t first = served / k * k, count = m->nrows - first < k ? m->nrows - first : k;
	struct dlshim_file_id id;
	dlshim_rows_chunk_id(m->dev, m->ino, m->mtime_ns, p.dset_hash, k, first / k, count * m->row_bytes, &id);
	struct dlshim_open_result *res = malloc(sizeof(*res));
	if (res == NULL) {
		pthread_mutex_unlock(&D.mu);
		return;
	}
	open_chunk(job, m, path, dset, &id, first, count, k, 0, res);
	/* The next rows this client will serve, decided now (after the served
	 * row's chunk is in, so they come from it first): it takes them from
	 * shared memory without asking. */
	if (redirect && j >= 0 && (m->flags & DLSHIM_ROWS_F_LEASE) && hc && lease_get(hc) == 0) {
		int64_t next = -1;
		r->lease_count = dlshim_rows_lease_fill(rows, hc->l, job, jk, m->dev, m->ino, m->nrows, lease_want(rc.k),
							rc.k, chunk_resident, &rc, &next);
		r->lease = 1;
		if (!hc->sent) {
			*pass_fd = hc->fd;
			hc->sent = 1;
		}
		if (next >= 0 && rc.dset_hash == p.dset_hash)
			ahead_start(job, m, path, dset, &p, (uint64_t)next);
	}
	pthread_mutex_unlock(&D.mu);
	r->served = served; /* also on PASS: the client then reads this row itself */
	if (res->kind == DLSHIM_OPEN_HIT) {
		/* Unpinned at once and the client's copy counted now: a row read
		 * costs one message, and a slot reused before the copy only sends
		 * the client to HDF5 (generation check). */
		uint64_t take = first + count - served;
		if (take > m->count)
			take = m->count;
		pthread_mutex_lock(&D.mu);
		dlshim_engine_release(D.eng, job, res->slot, res->gen, take * m->row_bytes, 0);
		pthread_mutex_unlock(&D.mu);
		r->status = DLSHIM_OPEN_R_HIT;
		r->slot = res->slot;
		r->gen = res->gen;
		r->size = count * m->row_bytes;
		r->first = first;
		r->count = count;
		r->chunk_rows = k;
	}
	free(res);
}

void h5rows_job_end(int job)
{
	if (rows)
		dlshim_rows_job_end(rows, job);
}
