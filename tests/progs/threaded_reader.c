/* threaded_reader: a TensorFlow-style multi-threaded file reader used by the
 * integration tests to check, byte for byte, what a real program receives
 * under the shim.
 *
 * N threads take files from a shared list (command line or stdin, one path
 * per line), each open/fstat/read/close, and print "<sha256>  <path>" per file
 * (the format of sha256sum, so outputs compare with plain text tools).
 *
 *   threaded_reader [-t threads] [-m pread|read|vec] [-c chunk] [-r reps]
 *                   [-o open|openat] [-w syncdir] [-d delay_us] [FILE...]
 *
 * Modes:
 *   pread  fstat, then pread() in chunks at increasing offsets; pread at EOF
 *          must return 0.
 *   read   read() in chunks to EOF; then lseek(SEEK_SET / SEEK_END) probes
 *          re-read parts of the file and must agree with the first pass and
 *          with the kernel offset (the shim keeps it in step, DESIGN rule 2).
 *   vec    read() a first piece, a pread() that must not move the offset,
 *          readv() to EOF, then preadv() of the whole file must agree.
 * Every mode checks the total against fstat's size. Any I/O error or
 * inconsistency is reported on stderr ("ERROR ...") and the exit status is 1.
 *
 * -w DIR: after the first repetition create DIR/ready and wait (up to 120 s)
 * for DIR/go before going on: a readiness handshake for fault-injection tests.
 *
 * Compiled twice by the tests: plain, and with -O2 -D_FORTIFY_SOURCE=2 so
 * glibc's fortified entry points (__open_2, __openat_2, __read_chk,
 * __pread_chk / __pread64_chk) are what the program calls. The read buffers
 * are arrays of known size and the open flags are not compile-time constants
 * precisely so that fortification kicks in.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- SHA-256 (FIPS 180-4), small and self-contained ---- */

struct sha256 {
	uint32_t h[8];
	uint64_t len;
	uint8_t buf[64];
	size_t nbuf;
};

static const uint32_t K256[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror32(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void sha256_init(struct sha256 *s)
{
	static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
					0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	memcpy(s->h, iv, sizeof iv);
	s->len = 0;
	s->nbuf = 0;
}

static void sha256_block(struct sha256 *s, const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, h;
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = s->h[0]; b = s->h[1]; c = s->h[2]; d = s->h[3];
	e = s->h[4]; f = s->h[5]; g = s->h[6]; h = s->h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) +
			      K256[i] + w[i];
		uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		h = g; g = f; f = e; e = d + t1;
		d = c; c = b; b = a; a = t1 + t2;
	}
	s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d;
	s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}

static void sha256_update(struct sha256 *s, const void *data, size_t n)
{
	const uint8_t *p = data;
	s->len += n;
	while (n > 0) {
		size_t take = 64 - s->nbuf;
		if (take > n)
			take = n;
		memcpy(s->buf + s->nbuf, p, take);
		s->nbuf += take;
		p += take;
		n -= take;
		if (s->nbuf == 64) {
			sha256_block(s, s->buf);
			s->nbuf = 0;
		}
	}
}

static void sha256_hex(struct sha256 *s, char out[65])
{
	uint64_t bits = s->len * 8;
	uint8_t pad = 0x80, zero = 0, lenb[8];
	sha256_update(s, &pad, 1);
	while (s->nbuf != 56)
		sha256_update(s, &zero, 1);
	for (int i = 0; i < 8; i++)
		lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
	sha256_update(s, lenb, 8);
	for (int i = 0; i < 8; i++)
		snprintf(out + 8 * i, 9, "%08x", s->h[i]);
	out[64] = 0;
}

/* ---- the reader ---- */

#define CHUNK_MAX (64 * 1024)

enum mode { MODE_PREAD, MODE_READ, MODE_VEC };

static char **g_files;
static size_t g_nfiles;
static size_t g_next;
static int g_failed;
static enum mode g_mode = MODE_PREAD;
static size_t g_chunk = 4096;
static int g_use_openat;
static long g_delay_us;
static volatile int g_oflags; /* volatile: keeps open() flags non-constant (fortified __open_2) */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *path, const char *what, int err)
{
	pthread_mutex_lock(&g_lock);
	if (err)
		fprintf(stderr, "ERROR %s: %s: %s\n", path, what, strerror(err));
	else
		fprintf(stderr, "ERROR %s: %s\n", path, what);
	g_failed = 1;
	pthread_mutex_unlock(&g_lock);
}

/* read() into a buffer of known size (so _FORTIFY_SOURCE routes it through
 * __read_chk), retrying EINTR. Callers pass n <= CHUNK_MAX; the bound is not
 * clamped here on purpose: a provably small n would let the compiler call the
 * plain read(). Returns bytes or -1. */
static ssize_t xread(int fd, size_t n, char *dst)
{
	char buf[CHUNK_MAX];
	ssize_t r;
	do
		r = read(fd, buf, n);
	while (r < 0 && errno == EINTR);
	if (r > 0)
		memcpy(dst, buf, (size_t)r);
	return r;
}

static ssize_t xpread(int fd, size_t n, off_t off, char *dst)
{
	char buf[CHUNK_MAX];
	ssize_t r;
	do
		r = pread(fd, buf, n, off);
	while (r < 0 && errno == EINTR);
	if (r > 0)
		memcpy(dst, buf, (size_t)r);
	return r;
}

/* Reads the whole file into *out (malloc'd, *len bytes). Returns 0 or -1. */
static int read_file(const char *path, char **out, size_t *len)
{
	int flags = g_oflags;
	int fd = g_use_openat ? openat(AT_FDCWD, path, flags) : open(path, flags);
	struct stat st;
	char *data = NULL;
	char probe[CHUNK_MAX];
	size_t size, got = 0;
	ssize_t r;
	int rc = -1;

	if (fd < 0) {
		fail(path, "open", errno);
		return -1;
	}
	if (fstat(fd, &st) != 0) {
		fail(path, "fstat", errno);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		fail(path, "not a regular file", 0);
		goto out;
	}
	size = (size_t)st.st_size;
	data = malloc(size + 1);
	if (!data) {
		fail(path, "malloc", ENOMEM);
		goto out;
	}

	if (g_mode == MODE_PREAD) {
		while (got < size) {
			size_t want = size - got < g_chunk ? size - got : g_chunk;
			r = xpread(fd, want, (off_t)got, data + got);
			if (r < 0) {
				fail(path, "pread", errno);
				goto out;
			}
			if (r == 0)
				break;
			got += (size_t)r;
		}
		if (got == size && xpread(fd, g_chunk, (off_t)size, probe) != 0) {
			fail(path, "pread at EOF did not return 0", 0);
			goto out;
		}
		if (lseek(fd, 0, SEEK_CUR) != 0) {
			fail(path, "pread moved the file offset", 0);
			goto out;
		}
	} else if (g_mode == MODE_READ) {
		while (got < size) {
			size_t want = size - got < g_chunk ? size - got : g_chunk;
			r = xread(fd, want, data + got);
			if (r < 0) {
				fail(path, "read", errno);
				goto out;
			}
			if (r == 0)
				break;
			if ((size_t)r > want) {
				fail(path, "read returned more than asked", 0);
				goto out;
			}
			got += (size_t)r;
		}
		if (got == size) {
			/* one more read must return 0 (EOF) */
			r = xread(fd, g_chunk, probe);
			if (r != 0) {
				fail(path, "read after the last byte did not return 0", r < 0 ? errno : 0);
				goto out;
			}
		}
		if (got == size && lseek(fd, 0, SEEK_CUR) != (off_t)size) {
			fail(path, "kernel offset after reading to EOF != size", 0);
			goto out;
		}
		/* seek probes: middle, near the end (SEEK_END), start */
		if (got == size && size > 0) {
			off_t offs[3] = { (off_t)(size / 3), -(off_t)(size < 100 ? size : 100), 0 };
			int whence[3] = { SEEK_SET, SEEK_END, SEEK_SET };
			for (int i = 0; i < 3; i++) {
				off_t pos = lseek(fd, offs[i], whence[i]);
				size_t want, n;
				if (pos < 0) {
					fail(path, "lseek", errno);
					goto out;
				}
				want = size - (size_t)pos;
				if (want > g_chunk)
					want = g_chunk;
				r = xread(fd, want, probe);
				if (r < 0) {
					fail(path, "read after lseek", errno);
					goto out;
				}
				n = (size_t)r;
				if (n != want || memcmp(probe, data + pos, n) != 0) {
					fail(path, "read after lseek returned other bytes than the first pass", 0);
					goto out;
				}
				if (lseek(fd, 0, SEEK_CUR) != pos + (off_t)n) {
					fail(path, "kernel offset not in step after read", 0);
					goto out;
				}
			}
		}
	} else { /* MODE_VEC */
		size_t first = size < 777 ? size : 777;
		char small[100];
		if (first > 0) {
			r = xread(fd, first, data);
			if (r < 0) {
				fail(path, "read", errno);
				goto out;
			}
			got = (size_t)r;
		}
		/* a pread must not disturb the offset used by readv */
		if (size > 0) {
			size_t n = size < sizeof small ? size : sizeof small;
			r = pread(fd, small, n, 0);
			if (r != (ssize_t)n) {
				fail(path, "pread(0)", r < 0 ? errno : 0);
				goto out;
			}
		}
		while (got < size) {
			size_t rest = size - got, a = rest < 1000 ? rest : 1000, b, c;
			struct iovec iov[3];
			rest -= a;
			b = rest < 3000 ? rest : 3000;
			rest -= b;
			c = rest < g_chunk ? rest : g_chunk;
			iov[0].iov_base = data + got;
			iov[0].iov_len = a;
			iov[1].iov_base = data + got + a;
			iov[1].iov_len = b;
			iov[2].iov_base = data + got + a + b;
			iov[2].iov_len = c;
			do
				r = readv(fd, iov, 3);
			while (r < 0 && errno == EINTR);
			if (r < 0) {
				fail(path, "readv", errno);
				goto out;
			}
			if (r == 0)
				break;
			got += (size_t)r;
		}
		if (size > 0 && got == size && memcmp(small, data, size < sizeof small ? size : sizeof small)) {
			fail(path, "pread(0) and read() disagree", 0);
			goto out;
		}
		if (got == size && lseek(fd, 0, SEEK_CUR) != (off_t)size) {
			fail(path, "kernel offset after readv to EOF != size", 0);
			goto out;
		}
		if (got == size && size > 0) {
			char *again = malloc(size);
			struct iovec iov[2];
			size_t h = size / 2, done = 0;
			if (!again) {
				fail(path, "malloc", ENOMEM);
				goto out;
			}
			iov[0].iov_base = again;
			iov[0].iov_len = h;
			iov[1].iov_base = again + h;
			iov[1].iov_len = size - h;
			r = preadv(fd, iov, 2, 0);
			if (r > 0)
				done = (size_t)r;
			while (r > 0 && done < size) { /* short preadv: finish with pread */
				r = pread(fd, again + done, size - done, (off_t)done);
				if (r > 0)
					done += (size_t)r;
			}
			if (r < 0 || done != size || memcmp(again, data, size) != 0) {
				free(again);
				fail(path, "preadv of the whole file disagrees with read/readv", r < 0 ? errno : 0);
				goto out;
			}
			free(again);
		}
	}

	if (got != size) {
		char msg[128];
		snprintf(msg, sizeof msg, "got %zu bytes, fstat says %zu", got, size);
		fail(path, msg, 0);
		goto out;
	}
	*out = data;
	*len = size;
	data = NULL;
	rc = 0;
out:
	free(data);
	if (close(fd) != 0) {
		fail(path, "close", errno);
		rc = -1;
	}
	return rc;
}

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		size_t i;
		char *data = NULL, hex[65];
		size_t len = 0;
		struct sha256 s;

		pthread_mutex_lock(&g_lock);
		i = g_next++;
		pthread_mutex_unlock(&g_lock);
		if (i >= g_nfiles)
			break;
		if (read_file(g_files[i], &data, &len) != 0)
			continue;
		sha256_init(&s);
		sha256_update(&s, data, len);
		sha256_hex(&s, hex);
		free(data);
		pthread_mutex_lock(&g_lock);
		printf("%s  %s\n", hex, g_files[i]);
		pthread_mutex_unlock(&g_lock);
		if (g_delay_us > 0) {
			struct timespec ts = { g_delay_us / 1000000, (g_delay_us % 1000000) * 1000 };
			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

static int wait_go(const char *dir)
{
	char ready[4096], go[4096];
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	int fd;
	snprintf(ready, sizeof ready, "%s/ready", dir);
	snprintf(go, sizeof go, "%s/go", dir);
	fflush(stdout);
	fd = open(ready, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		fprintf(stderr, "ERROR %s: %s\n", ready, strerror(errno));
		return -1;
	}
	close(fd);
	for (int i = 0; i < 12000; i++) {
		if (access(go, F_OK) == 0)
			return 0;
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "ERROR timed out waiting for %s\n", go);
	return -1;
}

static void usage(void)
{
	fprintf(stderr, "usage: threaded_reader [-t threads] [-m pread|read|vec] [-c chunk] [-r reps]\n"
			"                       [-o open|openat] [-w syncdir] [-d delay_us] [FILE...]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int nthreads = 8, reps = 1, opt;
	const char *syncdir = NULL;
	size_t cap = 0;
	pthread_t *tids;

	g_oflags = O_RDONLY | O_CLOEXEC;
	while ((opt = getopt(argc, argv, "t:m:c:r:o:w:d:")) != -1) {
		switch (opt) {
		case 't': nthreads = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'c': g_chunk = (size_t)strtoul(optarg, NULL, 10); break;
		case 'd': g_delay_us = atol(optarg); break;
		case 'w': syncdir = optarg; break;
		case 'o':
			if (strcmp(optarg, "open") == 0)
				g_use_openat = 0;
			else if (strcmp(optarg, "openat") == 0)
				g_use_openat = 1;
			else
				usage();
			break;
		case 'm':
			if (strcmp(optarg, "pread") == 0)
				g_mode = MODE_PREAD;
			else if (strcmp(optarg, "read") == 0)
				g_mode = MODE_READ;
			else if (strcmp(optarg, "vec") == 0)
				g_mode = MODE_VEC;
			else
				usage();
			break;
		default: usage();
		}
	}
	if (nthreads < 1 || reps < 1 || g_chunk < 1 || g_chunk > CHUNK_MAX)
		usage();

	if (optind < argc) {
		g_files = argv + optind;
		g_nfiles = (size_t)(argc - optind);
	} else {
		char *line = NULL;
		size_t lcap = 0;
		ssize_t n;
		while ((n = getline(&line, &lcap, stdin)) > 0) {
			while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
				line[--n] = 0;
			if (n == 0)
				continue;
			if (g_nfiles == cap) {
				cap = cap ? 2 * cap : 64;
				g_files = realloc(g_files, cap * sizeof *g_files);
				if (!g_files) {
					perror("realloc");
					return 1;
				}
			}
			g_files[g_nfiles++] = strdup(line);
		}
		free(line);
	}

	tids = calloc((size_t)nthreads, sizeof *tids);
	if (!tids)
		return 1;
	for (int rep = 0; rep < reps; rep++) {
		g_next = 0;
		for (int i = 0; i < nthreads; i++)
			if (pthread_create(&tids[i], NULL, worker, NULL) != 0) {
				fprintf(stderr, "ERROR pthread_create\n");
				return 1;
			}
		for (int i = 0; i < nthreads; i++)
			pthread_join(tids[i], NULL);
		if (rep == 0 && syncdir && wait_go(syncdir) != 0)
			return 1;
	}
	free(tids);
	if (fflush(stdout) != 0)
		return 1;
	return g_failed ? 1 : 0;
}
