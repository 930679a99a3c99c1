/* stress_reader: concurrency, fork, exec and signal stress for the shim
 * (tests/integration/test_stress.sh). Every byte read is checked.
 *
 * Files are self-describing: a 24-byte header ("DLSTRESS", seed, size)
 * followed by a stream derived from the seed, so any byte read at any offset
 * can be checked on the spot, and a byte of another file (or of another
 * offset) is always detected. `gen` writes such files; in exact mode the
 * seed must also match the one in the file's name (d<seed>.bin), with -R
 * (redirect modes) any self-consistent file of the right size is accepted.
 *
 *   stress_reader gen DIR N MIN MAX SEED        create N files d<seed>.bin
 *   stress_reader threads [-t N] [-i ITERS] [-R] FILE...
 *        N threads (default 64): even ones all read the same first 8 files in
 *        the same order, odd ones walk the list from their own start; each
 *        file read with read() in odd chunk sizes, pread() at random offsets
 *        (also past EOF), lseek()+read(), or readv()/preadv()
 *   stress_reader fork [-t N] [-f FORKS] FILE...
 *        N threads (default 8) loop open/read/close while the main thread
 *        forks FORKS times (default 20); each child checks a descriptor it
 *        inherited (opened under the shim before the fork) and reads 3 files
 *        (every 4th child execs `verify` with the same environment, every 4th
 *        one runs it through `env -i`), then exits; a child that has not
 *        exited within 20 s is a hang (killed, reported, exit status 1)
 *   stress_reader signals [-d SECS] [-u USEC] [-H] FILE...
 *        SIGALRM every USEC microseconds (default 150) from an interval timer,
 *        handler installed WITHOUT SA_RESTART; loops open/read/pread/close
 *        retrying EINTR, and prints every kind of outcome seen per call
 *        ("outcomes: open:ok read:full ..."); with -H the handler itself
 *        opens, preads and closes a file of the list (all async-signal-safe).
 *        A watchdog thread reports "HANG" and exits 3 after 10 s without
 *        progress.
 *   stress_reader verify FILE...                read each file once; prints
 *        "verified N shim=yes|no" (whether libdlshim is mapped)
 *
 * Any wrong byte, wrong size or unexpected error prints "ERROR ..." and
 * makes the exit status 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define HDR_LEN 24
#define MAGIC "DLSTRESS"

static atomic_long g_errors;
static atomic_long g_files;
static atomic_ullong g_bytes;
static int g_any_seed; /* -R: any self-consistent file will do */
static char **g_files_v;
static int g_nfiles;
static const char *g_self;

#define ERR(...)                                                                \
	do {                                                                    \
		atomic_fetch_add(&g_errors, 1);                                 \
		fprintf(stderr, "ERROR " __VA_ARGS__);                          \
	} while (0)

/* ---- the content of a file ---- */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void header_of(uint64_t seed, uint64_t size, unsigned char h[HDR_LEN])
{
	memcpy(h, MAGIC, 8);
	memcpy(h + 8, &seed, 8);
	memcpy(h + 16, &size, 8);
}

static unsigned char byte_at(uint64_t seed, uint64_t size, uint64_t off)
{
	if (off < HDR_LEN) {
		unsigned char h[HDR_LEN];
		header_of(seed, size, h);
		return h[off];
	}
	uint64_t w = mix64(seed * 0x9e3779b97f4a7c15ULL + (off >> 3));
	return (unsigned char)(w >> ((off & 7) * 8));
}

/* Compare buf[0..n) with the file's bytes at off; returns the first bad
 * index or -1. */
static long check_bytes(uint64_t seed, uint64_t size, uint64_t off, const unsigned char *buf, size_t n)
{
	size_t i = 0;
	while (i < n && off + i < HDR_LEN) {
		if (buf[i] != byte_at(seed, size, off + i))
			return (long)i;
		i++;
	}
	while (i < n) {
		uint64_t o = off + i;
		uint64_t w = mix64(seed * 0x9e3779b97f4a7c15ULL + (o >> 3));
		for (unsigned k = (unsigned)(o & 7); k < 8 && i < n; k++, i++)
			if (buf[i] != (unsigned char)(w >> (k * 8)))
				return (long)i;
	}
	return -1;
}

static uint64_t seed_of_name(const char *path)
{
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	if (b[0] != 'd')
		return 0;
	return strtoull(b + 1, NULL, 16);
}

static int gen(const char *dir, int n, long min, long max, uint64_t seed)
{
	unsigned char buf[65536];
	for (int i = 0; i < n; i++) {
		uint64_t s = mix64(seed + (uint64_t)i) | 1;
		uint64_t r = mix64(s ^ 0x5555);
		uint64_t size = (uint64_t)min + (max > min ? r % (uint64_t)(max - min + 1) : 0);
		/* a few sizes on block boundaries, and tiny ones */
		if (i % 16 == 1)
			size = 16384;
		else if (i % 16 == 2)
			size = 16385;
		else if (i % 16 == 3)
			size = 1;
		else if (i % 16 == 4)
			size = HDR_LEN;
		char path[4096];
		snprintf(path, sizeof path, "%s/d%016llx.bin", dir, (unsigned long long)s);
		FILE *f = fopen(path, "wb");
		if (f == NULL) {
			perror(path);
			return 1;
		}
		for (uint64_t off = 0; off < size;) {
			size_t k = size - off < sizeof buf ? (size_t)(size - off) : sizeof buf;
			for (size_t j = 0; j < k; j++)
				buf[j] = byte_at(s, size, off + j);
			if (fwrite(buf, 1, k, f) != k) {
				perror(path);
				return 1;
			}
			off += k;
		}
		if (fclose(f) != 0) {
			perror(path);
			return 1;
		}
	}
	return 0;
}

/* ---- reading one file ---- */

struct fileinfo {
	uint64_t seed, size;
};

static uint64_t rnd_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	return mix64(*s);
}

/* Open, learn and check identity. Returns fd or -1 (error counted). */
static int open_checked(const char *path, struct fileinfo *fi)
{
	int fd;
	do
		fd = open(path, O_RDONLY | O_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	if (fd < 0) {
		ERR("open %s: %s\n", path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		ERR("fstat %s: %s\n", path, strerror(errno));
		close(fd);
		return -1;
	}
	fi->size = (uint64_t)st.st_size;
	unsigned char h[HDR_LEN];
	uint64_t want_seed = seed_of_name(path);
	if (fi->size < HDR_LEN) {
		/* too small for a header: only exact mode can tell what it is */
		fi->seed = want_seed;
		return fd;
	}
	ssize_t n;
	do
		n = pread(fd, h, HDR_LEN, 0);
	while (n < 0 && errno == EINTR);
	if (n != HDR_LEN || memcmp(h, MAGIC, 8) != 0) {
		ERR("%s: bad header (pread %zd)\n", path, n);
		close(fd);
		return -1;
	}
	uint64_t hsize;
	memcpy(&fi->seed, h + 8, 8);
	memcpy(&hsize, h + 16, 8);
	if (hsize != fi->size) {
		ERR("%s: header says %llu bytes, fstat %llu\n", path, (unsigned long long)hsize,
		    (unsigned long long)fi->size);
		close(fd);
		return -1;
	}
	if (!g_any_seed && fi->seed != want_seed) {
		ERR("%s: the file read is d%016llx.bin\n", path, (unsigned long long)fi->seed);
		close(fd);
		return -1;
	}
	return fd;
}

static void verify_chunk(const char *path, const char *how, const struct fileinfo *fi, uint64_t off,
			 const unsigned char *buf, ssize_t n, size_t asked)
{
	if (n < 0)
		return;
	uint64_t expect = off >= fi->size ? 0 : (fi->size - off < asked ? fi->size - off : asked);
	if ((uint64_t)n != expect) {
		ERR("%s: %s at %llu asked %zu got %zd, expected %llu\n", path, how, (unsigned long long)off, asked, n,
		    (unsigned long long)expect);
		return;
	}
	long bad = check_bytes(fi->seed, fi->size, off, buf, (size_t)n);
	if (bad >= 0)
		ERR("%s: %s at %llu: wrong byte at %llu\n", path, how, (unsigned long long)off,
		    (unsigned long long)(off + (uint64_t)bad));
	atomic_fetch_add(&g_bytes, (unsigned long long)n);
}

static ssize_t read_retry(int fd, void *b, size_t n)
{
	ssize_t r;
	do
		r = read(fd, b, n);
	while (r < 0 && errno == EINTR);
	return r;
}

static ssize_t pread_retry(int fd, void *b, size_t n, off_t o)
{
	ssize_t r;
	do
		r = pread(fd, b, n, o);
	while (r < 0 && errno == EINTR);
	return r;
}

/* Read a whole file one of four ways; every byte checked. */
static void read_file(const char *path, int how, uint64_t *rs)
{
	static const size_t chunks[] = {1, 7, 4096, 16383, 16384, 16385, 65536, 200000};
	static __thread unsigned char buf[200000 + 64];
	struct fileinfo fi;
	int fd = open_checked(path, &fi);
	if (fd < 0)
		return;
	switch (how & 3) {
	case 0: { /* read() to EOF in changing chunk sizes */
		uint64_t off = 0;
		for (int k = (int)(rnd_next(rs) % 8);; k++) {
			size_t c = chunks[k % 8];
			if (c == 1 && off > 64)
				c = 4096; /* single bytes only at the start */
			ssize_t n = read_retry(fd, buf, c);
			if (n < 0) {
				ERR("%s: read: %s\n", path, strerror(errno));
				break;
			}
			verify_chunk(path, "read", &fi, off, buf, n, c);
			if (n == 0)
				break;
			off += (uint64_t)n;
		}
		if (off != fi.size)
			ERR("%s: read %llu bytes of %llu\n", path, (unsigned long long)off, (unsigned long long)fi.size);
		off_t cur = lseek(fd, 0, SEEK_CUR);
		if (cur != (off_t)fi.size)
			ERR("%s: offset after EOF is %lld, expected %llu\n", path, (long long)cur,
			    (unsigned long long)fi.size);
		break;
	}
	case 1: /* pread at random offsets, some past EOF */
		for (int k = 0; k < 12; k++) {
			uint64_t off = rnd_next(rs) % (fi.size + 20000);
			size_t c = 1 + (size_t)(rnd_next(rs) % 70000);
			ssize_t n = pread_retry(fd, buf, c, (off_t)off);
			if (n < 0) {
				ERR("%s: pread: %s\n", path, strerror(errno));
				break;
			}
			verify_chunk(path, "pread", &fi, off, buf, n, c);
		}
		if (lseek(fd, 0, SEEK_CUR) != 0)
			ERR("%s: pread moved the offset\n", path);
		break;
	case 2: /* lseek + read */
		for (int k = 0; k < 10; k++) {
			uint64_t off = rnd_next(rs) % (fi.size + 100);
			size_t c = 1 + (size_t)(rnd_next(rs) % 40000);
			if (lseek(fd, (off_t)off, SEEK_SET) != (off_t)off) {
				ERR("%s: lseek: %s\n", path, strerror(errno));
				break;
			}
			ssize_t n = read_retry(fd, buf, c);
			if (n < 0) {
				ERR("%s: read after lseek: %s\n", path, strerror(errno));
				break;
			}
			verify_chunk(path, "lseek+read", &fi, off, buf, n, c);
			off_t cur = lseek(fd, 0, SEEK_CUR);
			if (cur != (off_t)(off + (uint64_t)n))
				ERR("%s: offset %lld after reading %zd at %llu\n", path, (long long)cur, n,
				    (unsigned long long)off);
		}
		break;
	default: { /* readv to EOF, then preadv of the middle */
		uint64_t off = 0;
		for (;;) {
			struct iovec iov[3] = {{buf, 100}, {buf + 100, 16384}, {buf + 16484, 5000}};
			ssize_t n;
			do
				n = readv(fd, iov, 3);
			while (n < 0 && errno == EINTR);
			if (n < 0) {
				ERR("%s: readv: %s\n", path, strerror(errno));
				break;
			}
			verify_chunk(path, "readv", &fi, off, buf, n, 21484);
			if (n == 0)
				break;
			off += (uint64_t)n;
		}
		uint64_t mid = fi.size / 3;
		struct iovec iov[2] = {{buf, 1000}, {buf + 1000, 30000}};
		ssize_t n;
		do
			n = preadv(fd, iov, 2, (off_t)mid);
		while (n < 0 && errno == EINTR);
		verify_chunk(path, "preadv", &fi, mid, buf, n, 31000);
		break;
	}
	}
	close(fd);
	atomic_fetch_add(&g_files, 1);
}

/* ---- threads ---- */

struct worker {
	pthread_t t;
	int id;
	long iters;
	atomic_int *stop;
};

static void *thread_main(void *arg)
{
	struct worker *w = arg;
	uint64_t rs = 0x1234 + (uint64_t)w->id * 7919;
	int nsame = g_nfiles < 8 ? g_nfiles : 8;
	for (long i = 0; w->stop ? !atomic_load(w->stop) : i < w->iters; i++) {
		const char *p;
		if (w->id % 2 == 0)
			p = g_files_v[i % nsame]; /* the same files, in the same order, as every even thread */
		else
			p = g_files_v[((long)w->id * 5 + i) % g_nfiles];
		read_file(p, (int)(w->id / 2 + i), &rs);
	}
	return NULL;
}

static int run_threads(int nthreads, long iters)
{
	struct worker *w = calloc((size_t)nthreads, sizeof(*w));
	if (w == NULL)
		return 1;
	for (int i = 0; i < nthreads; i++) {
		w[i].id = i;
		w[i].iters = iters;
		if (pthread_create(&w[i].t, NULL, thread_main, &w[i]) != 0) {
			ERR("pthread_create %d\n", i);
			nthreads = i;
			break;
		}
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(w[i].t, NULL);
	free(w);
	printf("threads %d files %ld bytes %llu errors %ld\n", nthreads, atomic_load(&g_files),
	       (unsigned long long)atomic_load(&g_bytes), atomic_load(&g_errors));
	return atomic_load(&g_errors) ? 1 : 0;
}

/* ---- fork ---- */

static int shim_mapped(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	int yes = 0;
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f))
		if (strstr(line, "libdlshim"))
			yes = 1;
	fclose(f);
	return yes;
}

static int run_verify(void)
{
	uint64_t rs = 99;
	for (int i = 0; i < g_nfiles; i++)
		read_file(g_files_v[i], i, &rs);
	printf("verified %ld shim=%s\n", atomic_load(&g_files), shim_mapped() == 1 ? "yes" : "no");
	fflush(stdout);
	return atomic_load(&g_errors) ? 1 : 0;
}

static void child_exec(int clean_env)
{
	/* argv: self verify <3 files> */
	char *argv[8];
	int k = 0;
	if (clean_env) {
		argv[k++] = "/usr/bin/env";
		argv[k++] = "-i";
	}
	argv[k++] = (char *)g_self;
	argv[k++] = "verify";
	for (int j = 0; j < 3 && j < g_nfiles; j++)
		argv[k++] = g_files_v[(j * 7) % g_nfiles];
	argv[k] = NULL;
	execve(argv[0], argv, environ);
	_exit(126);
}

static int run_fork(int nthreads, int nforks)
{
	/* a routed descriptor the children inherit, opened and half read before the fork */
	struct fileinfo inh;
	const char *ipath = g_files_v[g_nfiles - 1];
	int ifd = open_checked(ipath, &inh);
	if (ifd < 0)
		return 1;
	static unsigned char half[200000];
	size_t h = inh.size / 2 < sizeof half ? (size_t)(inh.size / 2) : sizeof half;
	ssize_t n = read_retry(ifd, half, h);
	verify_chunk(ipath, "read before fork", &inh, 0, half, n, h);

	atomic_int stop = 0;
	struct worker *w = calloc((size_t)nthreads, sizeof(*w));
	if (w == NULL)
		return 1;
	for (int i = 0; i < nthreads; i++) {
		w[i].id = i;
		w[i].stop = &stop;
		pthread_create(&w[i].t, NULL, thread_main, &w[i]);
	}
	int hangs = 0, bad_children = 0;
	for (int f = 0; f < nforks; f++) {
		struct timespec ts = {0, (long)(10 + (f * 7) % 25) * 1000000L};
		nanosleep(&ts, NULL);
		fflush(stdout);
		fflush(stderr);
		pid_t pid = fork();
		if (pid < 0) {
			ERR("fork: %s\n", strerror(errno));
			continue;
		}
		if (pid == 0) {
			if (f % 4 == 2)
				child_exec(1);
			if (f % 4 == 3)
				child_exec(0);
			/* the inherited descriptor: offset as the parent left it, bytes right */
			static unsigned char cb[200000];
			off_t cur = lseek(ifd, 0, SEEK_CUR);
			if (cur != (off_t)h)
				ERR("child: inherited offset %lld, expected %zu\n", (long long)cur, h);
			size_t rest = (size_t)(inh.size - h) < sizeof cb ? (size_t)(inh.size - h) : sizeof cb;
			ssize_t m = read_retry(ifd, cb, rest);
			verify_chunk(ipath, "child read of inherited fd", &inh, h, cb, m, rest);
			/* the offset is shared with the parent and the next children: put it back */
			if (lseek(ifd, (off_t)h, SEEK_SET) != (off_t)h)
				ERR("child: lseek on the inherited fd: %s\n", strerror(errno));
			m = pread_retry(ifd, cb, 1000, 0);
			verify_chunk(ipath, "child pread of inherited fd", &inh, 0, cb, m, 1000);
			uint64_t rs = 777 + (uint64_t)f;
			for (int j = 0; j < 3; j++)
				read_file(g_files_v[(f * 3 + j) % g_nfiles], f + j, &rs);
			fflush(stdout);
			fflush(stderr);
			_exit(atomic_load(&g_errors) ? 1 : 0);
		}
		/* wait up to 20 s */
		int status = 0, done = 0;
		for (int t = 0; t < 4000; t++) {
			pid_t r = waitpid(pid, &status, WNOHANG);
			if (r == pid) {
				done = 1;
				break;
			}
			struct timespec d = {0, 5000000L};
			nanosleep(&d, NULL);
		}
		if (!done) {
			ERR("child %d (fork %d) did not exit within 20 s: hang\n", (int)pid, f);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			hangs++;
		} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			ERR("child %d (fork %d) failed: status 0x%x\n", (int)pid, f, status);
			bad_children++;
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < nthreads; i++)
		pthread_join(w[i].t, NULL);
	free(w);
	/* the parent's descriptor is still fine */
	n = pread_retry(ifd, half, h, 0);
	verify_chunk(ipath, "parent pread after forks", &inh, 0, half, n, h);
	close(ifd);
	printf("forks %d hangs %d failed_children %d files %ld errors %ld\n", nforks, hangs, bad_children,
	       atomic_load(&g_files), atomic_load(&g_errors));
	return atomic_load(&g_errors) ? 1 : 0;
}

/* ---- signals ---- */

enum { O_OPEN_OK, O_OPEN_EINTR, O_OPEN_ERR, O_READ_FULL, O_READ_EOF_SHORT, O_READ_SHORT_MID, O_READ_EOF,
       O_READ_EINTR, O_READ_ERR, O_PREAD_FULL, O_PREAD_EOF_SHORT, O_PREAD_SHORT_MID, O_PREAD_EOF,
       O_PREAD_EINTR, O_PREAD_ERR, O_CLOSE_OK, O_CLOSE_EINTR, O_CLOSE_ERR, O_MAX };
static const char *const outcome_names[O_MAX] = {
	"open:ok", "open:EINTR", "open:error", "read:full", "read:eof_short", "read:short_mid", "read:eof",
	"read:EINTR", "read:error", "pread:full", "pread:eof_short", "pread:short_mid", "pread:eof",
	"pread:EINTR", "pread:error", "close:ok", "close:EINTR", "close:error"};
static long outcomes[O_MAX];
static volatile sig_atomic_t sig_count, handler_bad;
static atomic_long progress;
static int handler_io;
static unsigned char handler_buf[4096];

static void on_alarm(int sig)
{
	(void)sig;
	int saved = errno;
	sig_count++;
	if (handler_io && g_nfiles > 0) {
		/* open, pread and close are async-signal-safe */
		const char *p = g_files_v[sig_count % g_nfiles];
		int fd = open(p, O_RDONLY);
		if (fd >= 0) {
			ssize_t n = pread(fd, handler_buf, 8, 0);
			if (n == 8 && memcmp(handler_buf, MAGIC, 8) != 0)
				handler_bad = 1;
			close(fd);
		}
	}
	errno = saved;
}

static void classify(int base_full, ssize_t n, size_t asked, uint64_t off, uint64_t size, int err)
{
	/* base_full is O_READ_FULL or O_PREAD_FULL; the others follow in order */
	int k;
	if (n < 0)
		k = err == EINTR ? base_full + 4 : base_full + 5;
	else if ((size_t)n == asked)
		k = base_full;
	else if (n == 0)
		k = base_full + 3;
	else if (off + (uint64_t)n >= size)
		k = base_full + 1;
	else
		k = base_full + 2;
	outcomes[k]++;
}

static void *watchdog(void *arg)
{
	(void)arg;
	long last = -1;
	int still = 0;
	for (;;) {
		sleep(1);
		long now = atomic_load(&progress);
		if (now == last) {
			if (++still >= 10) {
				fprintf(stderr, "HANG: no progress for 10 s (signals %d)\n", (int)sig_count);
				_exit(3);
			}
		} else {
			still = 0;
		}
		last = now;
	}
	return NULL;
}

static int run_signals(double secs, long usec)
{
	/* the watchdog must never take the SIGALRMs */
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	pthread_t wd;
	pthread_create(&wd, NULL, watchdog, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sa.sa_flags = 0; /* no SA_RESTART: slow calls may fail with EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {{0, usec}, {0, usec}};
	setitimer(ITIMER_REAL, &it, NULL);

	static unsigned char buf[70000];
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	uint64_t rs = 4242;
	long iter = 0;
	for (;; iter++) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9 > secs)
			break;
		const char *p = g_files_v[iter % g_nfiles];
		int fd;
		for (;;) {
			fd = open(p, O_RDONLY);
			if (fd >= 0) {
				outcomes[O_OPEN_OK]++;
				break;
			}
			if (errno == EINTR) {
				outcomes[O_OPEN_EINTR]++;
				continue;
			}
			outcomes[O_OPEN_ERR]++;
			ERR("open %s: %s\n", p, strerror(errno));
			break;
		}
		if (fd < 0)
			continue;
		struct stat st;
		fstat(fd, &st);
		uint64_t size = (uint64_t)st.st_size, seed = seed_of_name(p);
		struct fileinfo fi = {seed, size};
		/* read() to EOF; an EINTR must leave the offset unchanged */
		uint64_t off = 0;
		for (;;) {
			size_t c = 1 + (size_t)(rnd_next(&rs) % sizeof buf);
			ssize_t n = read(fd, buf, c);
			int e = errno;
			classify(O_READ_FULL, n, c, off, size, e);
			if (n < 0) {
				if (e != EINTR) {
					ERR("%s: read: %s\n", p, strerror(e));
					break;
				}
				off_t cur = lseek(fd, 0, SEEK_CUR);
				if (cur != (off_t)off)
					ERR("%s: EINTR from read moved the offset to %lld (was %llu)\n", p, (long long)cur,
					    (unsigned long long)off);
				continue;
			}
			verify_chunk(p, "read under signals", &fi, off, buf, n, c);
			if (n == 0)
				break;
			off += (uint64_t)n;
			atomic_fetch_add(&progress, 1);
		}
		for (int k = 0; k < 4; k++) {
			uint64_t o = rnd_next(&rs) % (size + 1000);
			size_t c = 1 + (size_t)(rnd_next(&rs) % sizeof buf);
			ssize_t n = pread(fd, buf, c, (off_t)o);
			int e = errno;
			classify(O_PREAD_FULL, n, c, o, size, e);
			if (n < 0 && e != EINTR)
				ERR("%s: pread: %s\n", p, strerror(e));
			if (n >= 0)
				verify_chunk(p, "pread under signals", &fi, o, buf, n, c);
		}
		if (close(fd) == 0)
			outcomes[O_CLOSE_OK]++;
		else if (errno == EINTR)
			outcomes[O_CLOSE_EINTR]++;
		else
			outcomes[O_CLOSE_ERR]++;
		atomic_fetch_add(&g_files, 1);
		atomic_fetch_add(&progress, 1);
	}
	struct itimerval off_t0 = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off_t0, NULL);
	if (handler_bad)
		ERR("the signal handler read wrong bytes\n");
	printf("outcomes:");
	for (int k = 0; k < O_MAX; k++)
		if (outcomes[k])
			printf(" %s", outcome_names[k]);
	printf("\ncounts:");
	for (int k = 0; k < O_MAX; k++)
		if (outcomes[k])
			printf(" %s=%ld", outcome_names[k], outcomes[k]);
	printf("\nsignals %d files %ld errors %ld\n", (int)sig_count, atomic_load(&g_files), atomic_load(&g_errors));
	return atomic_load(&g_errors) ? 1 : 0;
}

/* ---- main ---- */

static void usage(void)
{
	fprintf(stderr, "usage: stress_reader gen DIR N MIN MAX SEED | threads [-t N] [-i ITERS] [-R] FILE... |\n"
			"       fork [-t N] [-f FORKS] FILE... | signals [-d SECS] [-u USEC] [-H] FILE... | verify FILE...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	g_self = argv[0];
	char self[PATH_MAX];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
	if (sl > 0) {
		self[sl] = 0;
		g_self = strdup(self);
	}
	const char *mode = argv[1];
	if (strcmp(mode, "gen") == 0) {
		if (argc != 7)
			usage();
		return gen(argv[2], atoi(argv[3]), atol(argv[4]), atol(argv[5]), strtoull(argv[6], NULL, 0));
	}
	int nthreads = strcmp(mode, "fork") == 0 ? 8 : 64, nforks = 20, opt;
	long iters = 40, usec = 150;
	double secs = 3;
	optind = 2;
	while ((opt = getopt(argc, argv, "t:i:f:d:u:RH")) != -1) {
		switch (opt) {
		case 't': nthreads = atoi(optarg); break;
		case 'i': iters = atol(optarg); break;
		case 'f': nforks = atoi(optarg); break;
		case 'd': secs = atof(optarg); break;
		case 'u': usec = atol(optarg); break;
		case 'R': g_any_seed = 1; break;
		case 'H': handler_io = 1; break;
		default: usage();
		}
	}
	g_files_v = argv + optind;
	g_nfiles = argc - optind;
	if (g_nfiles <= 0)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (strcmp(mode, "threads") == 0)
		return run_threads(nthreads, iters);
	if (strcmp(mode, "fork") == 0)
		return run_fork(nthreads, nforks);
	if (strcmp(mode, "signals") == 0)
		return run_signals(secs, usec);
	if (strcmp(mode, "verify") == 0)
		return run_verify();
	usage();
	return 2;
}
