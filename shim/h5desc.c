/* Memo of the facts a routed H5Dread needs that do not change while the
 * file is open: the file's absolute path and whether it is under a root,
 * its read-only intent, HDF5's descriptor and the file's identity (per
 * file id), and the dataset's name (per dataset id). Asking HDF5 and the
 * kernel for these at every read cost about as much as the read itself,
 * and h5py opens a new dataset id for every `f["x"][i]`: so the file's
 * facts are kept by file id, which lives as long as the program's File.
 * HDF5 never reuses an id value, so an id names one open object; a closed
 * dataset is caught by H5Iis_valid. The identity is that of the file HDF5
 * has open (fstat of its sec2 descriptor), refreshed every
 * DESC_RESTAT_MS: a file rewritten in place is noticed (its chunks carry
 * the new mtime), one renamed over it is not the file HDF5 reads, and its
 * reads pass through. */
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "h5desc.h"
#include "shim.h"

#define DSETS 8
#define FILES 8
#define DESC_RESTAT_MS 100

struct dentry {
	h5id dset;                /* 0: empty */
	h5id fid;
	uint64_t used;
	char dname[sizeof(((struct h5_desc *)0)->dname)];
};

struct fentry {
	h5id fid;                 /* 0: empty */
	uint64_t stat_ns, used;
	struct h5_desc d;         /* d.dname unused */
};

static struct dentry dsets[DSETS];
static struct fentry files[FILES];
static uint64_t clock_used;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

void h5desc_atfork_prepare(void) { pthread_mutex_lock(&mu); }
void h5desc_atfork_parent(void) { pthread_mutex_unlock(&mu); }
void h5desc_atfork_child(void) { pthread_mutex_init(&mu, NULL); }

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no system call */
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Absolute path of the dataset's file if it is under a root. */
static int routed_path(const struct h5_fns *h, h5id dset, char *out, size_t len)
{
	char name[DLSHIM_PATH_MAX], cwd[DLSHIM_PATH_MAX];
	ssize_t n = h->Fget_name(dset, name, sizeof(name));
	if (n <= 0 || (size_t)n >= sizeof(name))
		return 0;
	if (name[0] != '/' && getcwd(cwd, sizeof(cwd)) == NULL)
		return 0;
	long l = dlshim_path_normalize(name[0] == '/' ? NULL : cwd, name, out, len);
	return l > 0 && dlshim_config_path_routed(&g_cfg, out, (size_t)l);
}

/* Ask HDF5 and the kernel about the file of `dset`. */
static int describe_file(const struct h5_fns *h, h5id dset, struct h5_desc *d)
{
	memset(d, 0, sizeof(*d));
	d->fd = -1;
	if (!routed_path(h, dset, d->path, sizeof(d->path)))
		return 0;
	/* A file open for writing may hold rows not yet on disk. */
	unsigned intent = 1;
	h5id fid = h->Iget_file_id(dset);
	if (fid < 0)
		return -1;
	int ir = h->Fget_intent(fid, &intent);
	/* The file HDF5 reads is the one it has open, not whatever the path
	 * names now (a file renamed over it): only the sec2 driver's handle is
	 * a descriptor we can fstat, and the path must still name that file
	 * (the coordinator opens it by path and checks the identity). */
	int fd = -1;
	h5id fapl = h->Fget_access_plist(fid);
	if (fapl >= 0) {
		void *hp = NULL;
		if (h->Pget_driver(fapl) == h->FD_sec2_init() && h->Fget_vfd_handle(fid, fapl, &hp) >= 0 && hp)
			fd = *(int *)hp;
		h->Pclose(fapl);
	}
	h->Fclose(fid);
	if (ir < 0)
		return -1;
	struct stat ps;
	d->fd = fd;
	d->routed = intent == H5_ACC_RDONLY && fd >= 0 && fstat(fd, &d->st) == 0 && S_ISREG(d->st.st_mode) &&
		    stat(d->path, &ps) == 0 && ps.st_dev == d->st.st_dev && ps.st_ino == d->st.st_ino;
	return 0;
}

/* The dataset's file id (a key: the reference is given back at once) and
 * name, from the memo or from HDF5. */
static int dataset_of(const struct h5_fns *h, h5id dset, h5id *fid, char *dname, size_t len)
{
	pthread_mutex_lock(&mu);
	struct dentry *e = NULL, *old = &dsets[0];
	for (int i = 0; i < DSETS && e == NULL; i++) {
		if (dsets[i].dset == dset)
			e = &dsets[i];
		else if (dsets[i].used < old->used)
			old = &dsets[i];
	}
	if (e) {
		e->used = ++clock_used;
		*fid = e->fid;
		memcpy(dname, e->dname, len);
		pthread_mutex_unlock(&mu);
		return 0;
	}
	pthread_mutex_unlock(&mu);
	/* HDF5 queries outside our lock: they may take HDF5's own. */
	h5id f = h->Iget_file_id(dset);
	if (f < 0)
		return -1;
	h->Fclose(f);
	ssize_t dn = h->Iget_name(dset, dname, len);
	if (dn <= 0 || (size_t)dn >= len)
		return -1;
	pthread_mutex_lock(&mu);
	old->dset = dset;
	old->fid = f;
	memcpy(old->dname, dname, len);
	old->used = ++clock_used;
	pthread_mutex_unlock(&mu);
	*fid = f;
	return 0;
}

int h5_desc_get(const struct h5_fns *h, h5id dset, struct h5_desc *out)
{
	if (h->Iis_valid(dset) <= 0)
		return -1;
	h5id fid;
	char dname[sizeof(out->dname)];
	if (dataset_of(h, dset, &fid, dname, sizeof(dname)) < 0)
		return -1;
	uint64_t t = now_ns();
	pthread_mutex_lock(&mu);
	struct fentry *e = NULL, *old = &files[0];
	for (int i = 0; i < FILES && e == NULL; i++) {
		if (files[i].fid == fid)
			e = &files[i];
		else if (files[i].used < old->used)
			old = &files[i];
	}
	if (e && e->d.routed && t - e->stat_ns > DESC_RESTAT_MS * 1000000ull) {
		/* A file rewritten in place gets a new mtime, so new chunk
		 * identities. One renamed over it is not the file HDF5 reads: the
		 * path no longer names it, and its reads pass through. */
		struct stat fs, ps;
		if (fstat(e->d.fd, &fs) != 0 || !S_ISREG(fs.st_mode) || fs.st_dev != e->d.st.st_dev ||
		    fs.st_ino != e->d.st.st_ino || stat(e->d.path, &ps) != 0 || ps.st_dev != fs.st_dev ||
		    ps.st_ino != fs.st_ino)
			e->d.routed = 0;
		else
			e->d.st = fs;
		e->stat_ns = t;
	}
	if (e) {
		e->used = ++clock_used;
		*out = e->d;
		pthread_mutex_unlock(&mu);
		memcpy(out->dname, dname, sizeof(out->dname));
		return 0;
	}
	pthread_mutex_unlock(&mu);
	if (describe_file(h, dset, out) < 0)
		return -1;
	pthread_mutex_lock(&mu);
	old->fid = fid;
	old->d = *out;
	old->stat_ns = t;
	old->used = ++clock_used;
	pthread_mutex_unlock(&mu);
	memcpy(out->dname, dname, sizeof(out->dname));
	return 0;
}
