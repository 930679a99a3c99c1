/* Per-dataset-id memo of the facts a routed H5Dread needs that do not
 * change while the id is open: the file's absolute path and whether it is
 * under a root, its read-only intent, the dataset's name, and the file's
 * identity. Asking HDF5 and the kernel for these at every read cost about
 * as much as the read itself. HDF5 never reuses an id value, so an id
 * names one open dataset; a closed one is caught by H5Iis_valid. The
 * identity is that of the file HDF5 has open (fstat of its sec2
 * descriptor), refreshed every DESC_RESTAT_MS: a file rewritten in place is
 * noticed (its chunks carry the new mtime), one renamed over it is not the
 * file HDF5 reads, and its reads pass through. */
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "h5desc.h"
#include "shim.h"

#define DESCS 8
#define DESC_RESTAT_MS 100

struct entry {
	h5id dset;                /* 0: empty */
	uint64_t stat_ns, used;
	struct h5_desc d;
};

static struct entry cache[DESCS];
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

/* Ask HDF5 and the kernel. */
static int describe(const struct h5_fns *h, h5id dset, struct h5_desc *d)
{
	memset(d, 0, sizeof(*d));
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
	ssize_t dn = h->Iget_name(dset, d->dname, sizeof(d->dname));
	if (ir < 0 || dn <= 0 || (size_t)dn >= sizeof(d->dname))
		return -1;
	struct stat ps;
	d->fd = fd;
	d->routed = intent == H5_ACC_RDONLY && fd >= 0 && fstat(fd, &d->st) == 0 && S_ISREG(d->st.st_mode) &&
		    stat(d->path, &ps) == 0 && ps.st_dev == d->st.st_dev && ps.st_ino == d->st.st_ino;
	return 0;
}

int h5_desc_get(const struct h5_fns *h, h5id dset, struct h5_desc *out)
{
	if (h->Iis_valid(dset) <= 0)
		return -1;
	uint64_t t = now_ns();
	pthread_mutex_lock(&mu);
	struct entry *e = NULL, *old = &cache[0];
	for (int i = 0; i < DESCS; i++) {
		if (cache[i].dset == dset) {
			e = &cache[i];
			break;
		}
		if (cache[i].used < old->used)
			old = &cache[i];
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
		return 0;
	}
	pthread_mutex_unlock(&mu);
	/* HDF5 queries outside our lock: they may take HDF5's own. */
	if (describe(h, dset, out) < 0)
		return -1;
	pthread_mutex_lock(&mu);
	old->dset = dset;
	old->d = *out;
	old->stat_ns = t;
	old->used = ++clock_used;
	pthread_mutex_unlock(&mu);
	return 0;
}
