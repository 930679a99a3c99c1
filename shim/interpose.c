/* The exported wrappers. Each is a one-liner into a static function that
 * first asks "is this mine?" (g_active, then a flat fd-table load) and
 * otherwise calls the real function with errno untouched. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlshim/scan.h"
#include "real.h"
#include "shim.h"

#define EXPORT __attribute__((visibility("default")))

/* glibc's fortified entry points have no public prototypes. */
int __open_2(const char *p, int f);
int __open64_2(const char *p, int f);
int __openat_2(int d, const char *p, int f);
int __openat64_2(int d, const char *p, int f);
ssize_t __read_chk(int fd, void *b, size_t n, size_t bl);
ssize_t __pread_chk(int fd, void *b, size_t n, off_t o, size_t bl);
ssize_t __pread64_chk(int fd, void *b, size_t n, off64_t o, size_t bl);

/* ---- the routing decision at open ---- */

/* Length of an absolute path with no "//", "/." component or trailing
 * slash (already normal), or 0. */
static size_t clean_len(const char *p)
{
	size_t i = 0;
	for (; p[i]; i++)
		if (p[i] == '/' && (p[i + 1] == '/' || p[i + 1] == '.' || p[i + 1] == 0))
			return 0;
	return i;
}

/* HDF5 files are read by the HDF5 library in small metadata and chunk
 * reads; their rows are cached at H5Dread instead (h5.c), so the file's
 * own bytes always pass through. */
static int is_hdf5_name(const char *p)
{
	const char *dot = strrchr(p, '.');
	return dot && strchr(dot, '/') == NULL &&
	       (strcasecmp(dot, ".h5") == 0 || strcasecmp(dot, ".hdf5") == 0 || strcasecmp(dot, ".he5") == 0);
}

/* Does this open concern a dataset file? Only read-only opens of paths
 * under a root qualify; everything else is never touched. `norm`, when
 * given, receives the normalised absolute path. */
static int wants_route_path(int dirfd, const char *path, int flags, char *norm)
{
	if (!g_active || g_in_shim || path == NULL)
		return 0;
	/* O_APPEND and O_CREAT announce a file that is being written (a cache
	 * entry would freeze it at open); the others are not plain reads. */
	if ((flags & O_ACCMODE) != O_RDONLY ||
	    (flags & (O_PATH | O_DIRECT | O_TRUNC | O_DIRECTORY | O_TMPFILE | O_APPEND | O_CREAT | O_EXCL)))
		return 0;
	if (is_hdf5_name(path))
		return 0;
	char local[DLSHIM_PATH_MAX], cwd[DLSHIM_PATH_MAX];
	char *buf = norm ? norm : local;
	long n;
	if (path[0] == '/') {
		/* Most absolute paths need no normalising: decide on them as they are. */
		size_t len = clean_len(path);
		if (len && norm == NULL)
			return dlshim_config_path_routed(&g_cfg, path, len);
		n = dlshim_path_normalize(NULL, path, buf, DLSHIM_PATH_MAX);
	} else {
		/* Relative paths cost a getcwd/readlink; absolute ones (the common
		 * case for datasets) do not. */
		if (dirfd == AT_FDCWD) {
			if (getcwd(cwd, sizeof(cwd)) == NULL)
				return 0;
		} else {
			char link[64];
			snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
			ssize_t l = readlink(link, cwd, sizeof(cwd) - 1);
			if (l <= 0)
				return 0;
			cwd[l] = 0;
		}
		n = dlshim_path_normalize(cwd, path, buf, DLSHIM_PATH_MAX);
	}
	return n > 0 && dlshim_config_path_routed(&g_cfg, buf, (size_t)n);
}

/* Files of a pseudo file system (a procfs or sysfs bound under a root)
 * are generated on read: their size says nothing of their bytes. The last
 * device found to be an ordinary file system saves the statfs next time. */
static int pseudo_file(int fd, const struct stat *st)
{
	static _Atomic unsigned long long plain_dev = ~0ULL;
	if ((unsigned long long)st->st_dev == atomic_load_explicit(&plain_dev, memory_order_relaxed))
		return 0;
	if (dlshim_fd_on_pseudo_fs(fd))
		return 1;
	atomic_store_explicit(&plain_dev, (unsigned long long)st->st_dev, memory_order_relaxed);
	return 0;
}

static int wants_route(int dirfd, const char *path, int flags) { return wants_route_path(dirfd, path, flags, NULL); }

/* A dataset path missing here may live on a peer node (DLSHIM_PEERS): ask
 * the coordinator. On any failure the caller's ENOENT stands. */
static int open_remote(int dirfd, const char *path, int flags)
{
	char norm[DLSHIM_PATH_MAX];
	if (!wants_route_path(dirfd, path, flags, norm))
		return -1;
	g_in_shim++;
	struct route *r = NULL;
	int fd = client_open_remote(norm, flags, &r);
	if (fd >= 0 && r) {
		if (fdt_set(fd, r) < 0)
			route_put(r);
		route_put(r); /* the table holds its own reference */
	}
	g_in_shim--;
	errno = ENOENT;
	return fd;
}

/* After the real open succeeded: register the descriptor with the cache. */
static void route_fd(int fd)
{
	int saved = errno;
	g_in_shim++;
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && !pseudo_file(fd, &st)) {
		struct route *r = client_open(fd, &st);
		if (r && fdt_set(fd, r) < 0)
			route_put(r);
		if (r)
			route_put(r); /* the table holds its own reference */
	}
	g_in_shim--;
	errno = saved;
}

static int do_openat(int dirfd, const char *path, int flags, mode_t mode, int variant)
{
	real_init();
	int fd;
	switch (variant) {
	case 0: fd = real.open ? real.open(path, flags, mode) : real.openat(AT_FDCWD, path, flags, mode); break;
	case 1: fd = real.open64 ? real.open64(path, flags, mode) : real.openat(AT_FDCWD, path, flags, mode); break;
	case 2: fd = real.openat(dirfd, path, flags, mode); break;
	case 3: fd = real.openat64(dirfd, path, flags, mode); break;
	case 4: fd = real.open_2 ? real.open_2(path, flags) : real.openat(AT_FDCWD, path, flags, 0); break;
	case 5: fd = real.open64_2 ? real.open64_2(path, flags) : real.openat(AT_FDCWD, path, flags, 0); break;
	case 6: fd = real.openat_2 ? real.openat_2(dirfd, path, flags) : real.openat(dirfd, path, flags, 0); break;
	default: fd = real.openat64_2 ? real.openat64_2(dirfd, path, flags) : real.openat(dirfd, path, flags, 0); break;
	}
	if (fd >= 0 && wants_route(dirfd, path, flags))
		route_fd(fd);
	else if (fd < 0 && errno == ENOENT && g_cfg.peers[0])
		fd = open_remote(dirfd, path, flags);
	return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

EXPORT int open(const char *p, int f, ...)
{
	va_list ap;
	va_start(ap, f);
	mode_t m = mode_arg(f, ap);
	va_end(ap);
	return do_openat(AT_FDCWD, p, f, m, 0);
}
EXPORT int open64(const char *p, int f, ...)
{
	va_list ap;
	va_start(ap, f);
	mode_t m = mode_arg(f, ap);
	va_end(ap);
	return do_openat(AT_FDCWD, p, f, m, 1);
}
EXPORT int openat(int d, const char *p, int f, ...)
{
	va_list ap;
	va_start(ap, f);
	mode_t m = mode_arg(f, ap);
	va_end(ap);
	return do_openat(d, p, f, m, 2);
}
EXPORT int openat64(int d, const char *p, int f, ...)
{
	va_list ap;
	va_start(ap, f);
	mode_t m = mode_arg(f, ap);
	va_end(ap);
	return do_openat(d, p, f, m, 3);
}
EXPORT int __open_2(const char *p, int f) { return do_openat(AT_FDCWD, p, f, 0, 4); }
EXPORT int __open64_2(const char *p, int f) { return do_openat(AT_FDCWD, p, f, 0, 5); }
EXPORT int __openat_2(int d, const char *p, int f) { return do_openat(d, p, f, 0, 6); }
EXPORT int __openat64_2(int d, const char *p, int f) { return do_openat(d, p, f, 0, 7); }

/* ---- reads ---- */

/* read(): serve from the cache at the kernel offset, then move the kernel
 * offset so fstat/lseek/mmap users see exactly what a real read did. */
static ssize_t do_read(int fd, void *buf, size_t n)
{
	struct route *r = fdt_get(fd);
	if (r == NULL || g_in_shim)
		return real.read(fd, buf, n);
	int saved = errno;
	off_t off = real.lseek(fd, 0, SEEK_CUR);
	if (off >= 0) {
		ssize_t got = route_read(r, (uint64_t)off, buf, n);
		if (got >= 0 && (got == 0 || real.lseek(fd, off + got, SEEK_SET) == off + got)) {
			errno = saved;
			return got;
		}
	}
	errno = saved;
	ssize_t got = real.read(fd, buf, n);
	if (got > 0)
		atomic_fetch_add_explicit(&r->bytes_pass, (unsigned long long)got, memory_order_relaxed);
	return got;
}

static ssize_t do_pread(int fd, void *buf, size_t n, off_t off)
{
	struct route *r = fdt_get(fd);
	if (r != NULL && !g_in_shim && off >= 0) {
		ssize_t got = route_read(r, (uint64_t)off, buf, n);
		if (got >= 0)
			return got;
	}
	ssize_t got = real.pread(fd, buf, n, off);
	if (r && got > 0)
		atomic_fetch_add_explicit(&r->bytes_pass, (unsigned long long)got, memory_order_relaxed);
	return got;
}

/* Scatter a cache read over an iovec; -1 when the cache cannot serve it. */
static ssize_t route_readv(struct route *r, uint64_t off, const struct iovec *iov, int cnt)
{
	if (cnt < 0)
		return -1;
	ssize_t total = 0;
	for (int i = 0; i < cnt; i++) {
		if (iov[i].iov_len == 0)
			continue;
		ssize_t got = route_read(r, off + (uint64_t)total, iov[i].iov_base, iov[i].iov_len);
		if (got < 0)
			return -1; /* partial copies are simply redone by the real call */
		total += got;
		if ((size_t)got < iov[i].iov_len)
			break;
	}
	return total;
}

static ssize_t do_readv(int fd, const struct iovec *iov, int cnt)
{
	struct route *r = fdt_get(fd);
	if (r != NULL && !g_in_shim) {
		int saved = errno;
		off_t off = real.lseek(fd, 0, SEEK_CUR);
		if (off >= 0) {
			ssize_t got = route_readv(r, (uint64_t)off, iov, cnt);
			if (got >= 0 && (got == 0 || real.lseek(fd, off + got, SEEK_SET) == off + got)) {
				errno = saved;
				return got;
			}
		}
		errno = saved;
	}
	return real.readv(fd, iov, cnt);
}

static ssize_t do_preadv(int fd, const struct iovec *iov, int cnt, off_t off, int is64)
{
	struct route *r = fdt_get(fd);
	if (r != NULL && !g_in_shim && off >= 0) {
		ssize_t got = route_readv(r, (uint64_t)off, iov, cnt);
		if (got >= 0)
			return got;
	}
	return is64 ? real.preadv64(fd, iov, cnt, off) : real.preadv(fd, iov, cnt, off);
}

EXPORT ssize_t read(int fd, void *b, size_t n) { real_init(); return do_read(fd, b, n); }
EXPORT ssize_t pread(int fd, void *b, size_t n, off_t o) { real_init(); return do_pread(fd, b, n, o); }
EXPORT ssize_t pread64(int fd, void *b, size_t n, off64_t o) { real_init(); return do_pread(fd, b, n, o); }
EXPORT ssize_t readv(int fd, const struct iovec *v, int c) { real_init(); return do_readv(fd, v, c); }
EXPORT ssize_t preadv(int fd, const struct iovec *v, int c, off_t o) { real_init(); return do_preadv(fd, v, c, o, 0); }
EXPORT ssize_t preadv64(int fd, const struct iovec *v, int c, off64_t o) { real_init(); return do_preadv(fd, v, c, o, 1); }

/* Fortified variants: glibc checks the buffer size, then reads. */
__attribute__((noreturn)) static void chk_fail(void)
{
	extern void __chk_fail(void) __attribute__((noreturn));
	__chk_fail();
}
EXPORT ssize_t __read_chk(int fd, void *b, size_t n, size_t bl)
{
	if (n > bl)
		chk_fail();
	real_init();
	return do_read(fd, b, n);
}
EXPORT ssize_t __pread_chk(int fd, void *b, size_t n, off_t o, size_t bl)
{
	if (n > bl)
		chk_fail();
	real_init();
	return do_pread(fd, b, n, o);
}
EXPORT ssize_t __pread64_chk(int fd, void *b, size_t n, off64_t o, size_t bl)
{
	if (n > bl)
		chk_fail();
	real_init();
	return do_pread(fd, b, n, o);
}

/* The kernel offset is the truth for routed descriptors, so lseek passes
 * through; it is wrapped to keep one place that could observe seeks. */
EXPORT off_t lseek(int fd, off_t o, int w) { real_init(); return real.lseek(fd, o, w); }
EXPORT off64_t lseek64(int fd, off64_t o, int w) { real_init(); return real.lseek64(fd, o, w); }

/* ---- descriptor lifetime ---- */

static void forget(int fd)
{
	struct route *r = fdt_get(fd) ? fdt_take(fd) : NULL;
	if (r) {
		int saved = errno;
		g_in_shim++;
		route_put(r);
		g_in_shim--;
		errno = saved;
	}
}

static void follow_dup(int oldfd, int newfd)
{
	struct route *r = fdt_get(oldfd);
	/* Beyond the table the duplicate simply reads through the kernel. */
	if (r && newfd >= 0)
		(void)fdt_set(newfd, r);
}

EXPORT int close(int fd)
{
	real_init();
	forget(fd);
	return real.close(fd);
}

EXPORT int dup(int fd)
{
	real_init();
	int n = real.dup(fd);
	if (n >= 0)
		follow_dup(fd, n);
	return n;
}

EXPORT int dup2(int fd, int nfd)
{
	real_init();
	int n = real.dup2(fd, nfd);
	if (n >= 0 && fd != nfd) {
		forget(nfd);
		follow_dup(fd, n);
	}
	return n;
}

EXPORT int dup3(int fd, int nfd, int fl)
{
	real_init();
	int n = real.dup3(fd, nfd, fl);
	if (n >= 0) {
		forget(nfd);
		follow_dup(fd, n);
	}
	return n;
}

static int do_fcntl(int fd, int cmd, void *arg, int is64)
{
	int (*f)(int, int, ...) = is64 && real.fcntl64 ? real.fcntl64 : real.fcntl;
	int n = f(fd, cmd, arg);
	if (n >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		follow_dup(fd, n);
	return n;
}

/* Every fcntl argument (int, long or pointer) fits in a pointer-sized
 * register slot on the ABIs we support, so forwarding it as void * is exact. */
EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	real_init();
	return do_fcntl(fd, cmd, arg, 0);
}
EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	real_init();
	return do_fcntl(fd, cmd, arg, 1);
}

/* ---- stdio ---- */

/* fopen goes through the same decision as open: a read-only stream on a
 * routed path is opened by the shim (so it is cached and, in redirect
 * modes, refers to the served file) and wrapped with fdopen; stdio then
 * reads it through the kernel, which sees the same file. */
static int read_only_mode(const char *m, int *cloexec)
{
	if (m == NULL || m[0] != 'r')
		return 0;
	*cloexec = 0;
	for (const char *p = m + 1; *p && *p != ','; p++) {
		if (*p == '+')
			return 0;
		if (*p == 'e')
			*cloexec = 1;
	}
	return 1;
}

static FILE *do_fopen(const char *p, const char *m, int is64)
{
	real_init();
	int cloexec;
	if (g_active && !g_in_shim && read_only_mode(m, &cloexec) && wants_route(AT_FDCWD, p, O_RDONLY)) {
		int fd = real.openat(AT_FDCWD, p, O_RDONLY | (cloexec ? O_CLOEXEC : 0), 0);
		if (fd < 0)
			return NULL; /* errno as the real fopen would have set it */
		route_fd(fd);
		FILE *f = fdopen(fd, m);
		if (f == NULL) {
			int saved = errno;
			forget(fd);
			real.close(fd);
			errno = saved;
		}
		return f;
	}
	if (is64 && real.fopen64)
		return real.fopen64(p, m);
	return real.fopen(p, m);
}

EXPORT FILE *fopen(const char *p, const char *m) { return do_fopen(p, m, 0); }
EXPORT FILE *fopen64(const char *p, const char *m) { return do_fopen(p, m, 1); }
EXPORT int fclose(FILE *fp)
{
	real_init();
	if (fp && g_active)
		forget(fileno(fp));
	return real.fclose(fp);
}
