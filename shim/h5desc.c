/* Per-dataset-id memo of the facts a routed H5Dread needs that do not
 * change while the id is open: the file's absolute path and whether it is
 * under a root, its read-only intent, the dataset's name, and the file's
 * identity. Asking HDF5 and the kernel for these at every read cost about
 * as much as the read itself. HDF5 never reuses an id value, so an id
 * names one open dataset; a closed one is caught by H5Iis_valid. The
 * file's stat is refreshed every DESC_RESTAT_MS so that a replaced file is
 * noticed (its chunks carry the new identity). */
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
	h->Fclose(fid);
	ssize_t dn = h->Iget_name(dset, d->dname, sizeof(d->dname));
	if (ir < 0 || dn <= 0 || (size_t)dn >= sizeof(d->dname))
		return -1;
	d->routed = intent == H5_ACC_RDONLY && stat(d->path, &d->st) == 0 && S_ISREG(d->st.st_mode);
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
		if (stat(e->d.path, &e->d.st) != 0 || !S_ISREG(e->d.st.st_mode))
			e->d.routed = 0;
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
