/* Extent reads: load a chunk of small files with a few large direct reads of
 * the block device instead of one request per file.
 *
 * Where every request costs (network disks, IOPS-limited volumes), reading a
 * chunk of 100 KB files one by one is bounded by the request rate, not the
 * bandwidth. Files of one directory written together usually sit next to
 * each other on disk, so the coordinator asks the file system where each
 * file's bytes are (FIEMAP, after syncing them), sorts the extents of the
 * chunk, merges neighbours into runs of up to RUN_MAX and reads each run with
 * one O_DIRECT pread of the device.
 *
 * Correctness does not rest on the map: a file is only taken this way when
 * every extent is plain (no delayed allocation, inline data, encoding,
 * encryption or unwritten space) and covers the file without holes, and only
 * kept when its size, mtime and ctime are the same after the read as before
 * the map was taken; anything else is left to the ordinary per-file read.
 * The device is only used when the coordinator may open it (root, or the
 * disk group): for other users this path is simply off.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "extent_read.h"

#define MAX_EXTENTS 16            /* per file; more fragmented files read per file */
#define RUN_MAX (4u << 20)        /* bytes per device read */
#define GAP_MAX (64u << 10)       /* bytes of other data worth reading over */
#define ALIGN 4096u

struct seg {
	uint64_t phys, len, logical;
	uint32_t file;
};

struct fileinfo {
	struct stat st;
	int ok;
};

/* ---- the device of a file system --------------------------------------- */

#define MAX_DEVS 16
static struct {
	dev_t dev;
	int fd; /* -1: cannot be used */
} devs[MAX_DEVS];
static int ndevs;
static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static int disabled;

void extent_read_disable(void) { disabled = 1; }

/* A block device node in `dir` whose number is `dev`, opened for direct reads. */
static int open_dev_in(const char *dir, dev_t dev)
{
	DIR *d = opendir(dir);
	if (d == NULL)
		return -1;
	int fd = -1;
	struct dirent *de;
	while (fd < 0 && (de = readdir(d)) != NULL) {
		char path[512];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (stat(path, &st) == 0 && S_ISBLK(st.st_mode) && st.st_rdev == dev)
			fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	}
	closedir(d);
	return fd;
}

static int dev_fd(dev_t dev)
{
	pthread_mutex_lock(&dev_mu);
	int fd = -1, found = 0;
	for (int i = 0; i < ndevs; i++)
		if (devs[i].dev == dev) {
			fd = devs[i].fd;
			found = 1;
		}
	if (!found && ndevs < MAX_DEVS) {
		fd = open_dev_in("/dev", dev);
		if (fd < 0)
			fd = open_dev_in("/dev/mapper", dev);
		devs[ndevs].dev = dev;
		devs[ndevs].fd = fd;
		ndevs++;
	}
	pthread_mutex_unlock(&dev_mu);
	return fd;
}

int extent_read_available(dev_t dev) { return !disabled && dev_fd(dev) >= 0; }

/* ---- the map of one file -------------------------------------------------- */

static int same_file_state(const struct stat *a, const struct stat *b)
{
	return a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	       a->st_ctim.tv_nsec == b->st_ctim.tv_nsec && a->st_ino == b->st_ino;
}

/* Append the file's extents to segs; 0 when every byte of it is mapped to
 * plain, aligned device blocks. */
static int map_file(int fd, uint64_t size, uint32_t file, struct seg *segs, uint32_t *nsegs)
{
	union {
		struct fiemap fm;
		char buf[sizeof(struct fiemap) + MAX_EXTENTS * sizeof(struct fiemap_extent)];
	} u;
	memset(&u, 0, sizeof(u));
	u.fm.fm_start = 0;
	u.fm.fm_length = FIEMAP_MAX_OFFSET;
	u.fm.fm_flags = FIEMAP_FLAG_SYNC; /* dirty pages written first: the device holds the bytes */
	u.fm.fm_extent_count = MAX_EXTENTS;
	if (ioctl(fd, FS_IOC_FIEMAP, &u.fm) < 0 || u.fm.fm_mapped_extents == 0)
		return -1;
	const uint32_t bad = FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_ENCODED |
			     FIEMAP_EXTENT_DATA_ENCRYPTED | FIEMAP_EXTENT_NOT_ALIGNED | FIEMAP_EXTENT_DATA_INLINE |
			     FIEMAP_EXTENT_DATA_TAIL | FIEMAP_EXTENT_UNWRITTEN;
	uint64_t covered = 0;
	uint32_t first = *nsegs;
	for (uint32_t i = 0; i < u.fm.fm_mapped_extents && covered < size; i++) {
		const struct fiemap_extent *x = &u.fm.fm_extents[i];
		if ((x->fe_flags & bad) || x->fe_logical != covered || x->fe_physical % 512 || x->fe_length == 0) {
			*nsegs = first;
			return -1; /* a hole, an odd extent: read this file the ordinary way */
		}
		uint64_t len = x->fe_length < size - covered ? x->fe_length : size - covered;
		segs[(*nsegs)++] = (struct seg){x->fe_physical, len, covered, file};
		covered += len;
	}
	if (covered < size) {
		*nsegs = first;
		return -1;
	}
	return 0;
}

static int cmp_seg(const void *a, const void *b)
{
	const struct seg *x = a, *y = b;
	return (x->phys > y->phys) - (x->phys < y->phys);
}

/* ---- the batch ---------------------------------------------------------------- */

uint32_t extent_read_batch(const int *fd, const uint64_t *size, uint32_t n, const struct extent_sink *sink,
			   uint8_t *done, struct extent_read_stats *stats)
{
	memset(done, 0, n);
	if (disabled || n < 2)
		return 0;
	struct fileinfo *fi = calloc(n, sizeof(*fi));
	struct seg *segs = calloc((size_t)n * MAX_EXTENTS, sizeof(*segs));
	uint8_t *buf = NULL;
	if (fi == NULL || segs == NULL || posix_memalign((void **)&buf, ALIGN, RUN_MAX + 2 * ALIGN) != 0) {
		free(fi), free(segs);
		return 0;
	}
	/* Every file must be on one device the coordinator can read. */
	uint32_t nsegs = 0;
	int devfd = -1;
	dev_t dev = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (fd[i] < 0 || size[i] == 0 || fstat(fd[i], &fi[i].st) < 0 || !S_ISREG(fi[i].st.st_mode))
			continue;
		if (devfd < 0) {
			dev = fi[i].st.st_dev;
			devfd = dev_fd(dev);
			if (devfd < 0)
				break;
		}
		if (fi[i].st.st_dev != dev || (uint64_t)fi[i].st.st_size != size[i])
			continue;
		fi[i].ok = map_file(fd[i], size[i], i, segs, &nsegs) == 0;
	}
	qsort(segs, nsegs, sizeof(*segs), cmp_seg);
	/* Runs of neighbouring extents, each read with one request. */
	for (uint32_t s = 0; s < nsegs && devfd >= 0;) {
		uint64_t start = segs[s].phys & ~(uint64_t)(ALIGN - 1), end = segs[s].phys + segs[s].len;
		uint32_t e = s + 1;
		while (e < nsegs && segs[e].phys >= end && segs[e].phys - end <= GAP_MAX &&
		       segs[e].phys + segs[e].len - start <= RUN_MAX) {
			end = segs[e].phys + segs[e].len;
			e++;
		}
		if (end - start > RUN_MAX) {
			/* One extent larger than a run: that file is read per file. */
			for (uint32_t k = s; k < e; k++)
				fi[segs[k].file].ok = 0;
			s = e;
			continue;
		}
		uint64_t len = (end - start + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
		ssize_t r;
		do
			r = pread(devfd, buf, len, (off_t)start);
		while (r < 0 && errno == EINTR);
		if (r < (ssize_t)(end - start)) {
			for (uint32_t k = s; k < e; k++)
				fi[segs[k].file].ok = 0;
			s = e;
			continue;
		}
		stats->runs++;
		stats->device_bytes += (uint64_t)r;
		for (uint32_t k = s; k < e; k++) {
			const struct seg *g = &segs[k];
			if (fi[g->file].ok &&
			    sink->put(sink->ctx, g->file, g->logical, buf + (g->phys - start), g->len) < 0)
				fi[g->file].ok = 0;
		}
		s = e;
	}
	/* Keep only files that did not change while they were mapped and read. */
	uint32_t ndone = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct stat now;
		if (fi[i].ok && fstat(fd[i], &now) == 0 && same_file_state(&fi[i].st, &now)) {
			done[i] = 1;
			ndone++;
			stats->files++;
			stats->file_bytes += size[i];
		}
	}
	free(buf);
	free(segs);
	free(fi);
	return ndone;
}
