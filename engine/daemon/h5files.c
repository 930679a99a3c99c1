/* The coordinator's use of the HDF5 library (engine/daemon/h5files.h):
 * how it opens files, the files it keeps open for row loads, a dataset's
 * row chunking, and reading a run of rows. The serial HDF5 library is not
 * thread-safe: every HDF5 call here holds h5_mu. */
#include <fcntl.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlshim/rows.h"
#include "dlshim/shm.h"
#include "h5files.h"

#define AGG_BYTES (512u * 1024u) /* default bytes per row chunk: large reads, little waste */

static pthread_mutex_t h5_mu = PTHREAD_MUTEX_INITIALIZER;

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

int h5files_plan(const char *path, const char *dset, const struct dlshim_msg_rows *m, uint64_t cache_bytes,
		 uint64_t *chunk_rows)
{
	pthread_mutex_lock(&h5_mu);
	h5_init_locked();
	hid_t f = open_checked(path, m);
	if (f < 0) {
		pthread_mutex_unlock(&h5_mu);
		return -1;
	}
	hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
	int ok = d >= 0 && plan_dataset(d, m, cache_bytes, chunk_rows);
	if (d >= 0)
		H5Dclose(d);
	H5Fclose(f);
	pthread_mutex_unlock(&h5_mu);
	return ok;
}

int h5files_read_rows(const char *path, const char *dset, const struct dlshim_msg_rows *m, uint64_t first,
		      uint64_t count, void *buf)
{
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
	return rc;
}
