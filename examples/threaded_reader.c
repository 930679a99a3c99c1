/* threaded_reader: a TensorFlow-style input pipeline in C, to copy and adapt.
 *
 * N threads take files from a shared list and, per file, open / fstat /
 * pread (in chunks) / close -- the pattern of tf.data's parallel file readers
 * and of most C++ data loaders. It prints the throughput and a checksum, and
 * needs nothing from dlshim: it runs the same with and without the shim.
 *
 * Build:
 *     cc -O2 -pthread -o threaded_reader examples/threaded_reader.c
 *
 * Run (file list on stdin or as arguments; one path per line):
 *     find /data/train -type f | sort > list
 *     ./threaded_reader -t 8 < list                        # plain reads
 *     DLSHIM_ROOTS=/data/train build/dlshim run -- ./threaded_reader -t 8 -e 2 < list
 *     build/dlshim stats                                   # what the shim served
 *
 * Options:
 *     -t N      reader threads (default 4)
 *     -c BYTES  pread chunk size (default 262144)
 *     -e N      epochs: read the whole list N times, each epoch in a new
 *               shuffled order (default 1)
 *     -s SEED   shuffle seed (default 1; 0 keeps the list order)
 *     -v        also print "<sha256>  <path>" per file (as sha256sum does)
 *
 * Output (stdout), one line per epoch and a final checksum:
 *     epoch 1: 1000 files, 104857600 bytes, 0.412 s, 254.5 MB/s, 2427 files/s
 *     checksum <hex>
 * The checksum is the SHA-256 of the text `sha256sum FILE...` prints for the
 * list in its given order, so it can be checked without this program:
 *     xargs -d '\n' sha256sum < list | sha256sum
 * Every epoch must produce the same digest for every file; if a file's bytes
 * differ between epochs, or a read fails or comes up short of fstat's size,
 * the program says so on stderr and exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- SHA-256 (FIPS 180-4), self-contained ---- */

struct sha256 {
	uint32_t h[8];
	uint64_t len;
	uint8_t buf[64];
	size_t nbuf;
};

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static void sha_init(struct sha256 *s)
{
	static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
				       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
	memcpy(s->h, iv, sizeof(iv));
	s->len = 0;
	s->nbuf = 0;
}

static void sha_block(struct sha256 *s, const uint8_t *p)
{
	uint32_t w[64], v[8];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	memcpy(v, s->h, sizeof(v));
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = v[7] + (ror(v[4], 6) ^ ror(v[4], 11) ^ ror(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6])) + K[i] + w[i];
		uint32_t t2 = (ror(v[0], 2) ^ ror(v[0], 13) ^ ror(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
		memmove(v + 1, v, 7 * sizeof(uint32_t));
		v[4] += t1;
		v[0] = t1 + t2;
	}
	for (int i = 0; i < 8; i++)
		s->h[i] += v[i];
}

static void sha_update(struct sha256 *s, const void *data, size_t n)
{
	const uint8_t *p = data;
	s->len += n;
	while (n > 0) {
		if (s->nbuf == 0 && n >= 64) {
			sha_block(s, p);
			p += 64;
			n -= 64;
			continue;
		}
		size_t k = 64 - s->nbuf < n ? 64 - s->nbuf : n;
		memcpy(s->buf + s->nbuf, p, k);
		s->nbuf += k;
		p += k;
		n -= k;
		if (s->nbuf == 64) {
			sha_block(s, s->buf);
			s->nbuf = 0;
		}
	}
}

static void sha_hex(struct sha256 *s, char out[65])
{
	uint64_t bits = s->len * 8;
	uint8_t pad = 0x80, zero = 0, len[8];
	sha_update(s, &pad, 1);
	while (s->nbuf != 56)
		sha_update(s, &zero, 1);
	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)(bits >> (56 - 8 * i));
	sha_update(s, len, 8);
	for (int i = 0; i < 8; i++)
		sprintf(out + 8 * i, "%08x", s->h[i]);
}

/* ---- the reader ---- */

static char **paths;
static size_t npaths;
static size_t *order;		/* this epoch's permutation of the list */
static char (*digest)[65];	/* per file, from the first epoch */
static size_t chunk = 262144;
static int epoch_no;
static size_t next_item;	/* shared work counter */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t bytes_read;
static int errors;

static void fail(const char *path, const char *what)
{
	pthread_mutex_lock(&mu);
	fprintf(stderr, "threaded_reader: %s: %s\n", path, what);
	errors++;
	pthread_mutex_unlock(&mu);
}

/* open / fstat / pread in chunks / close: returns bytes read, -1 on error. */
static long long read_file(const char *path, char *buf, char hex[65])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fail(path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		fail(path, strerror(errno));
		close(fd);
		return -1;
	}
	struct sha256 s;
	sha_init(&s);
	off_t off = 0;
	for (;;) {
		ssize_t n = pread(fd, buf, chunk, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fail(path, strerror(errno));
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		sha_update(&s, buf, (size_t)n);
		off += n;
	}
	close(fd);
	if (off != st.st_size) {
		char msg[96];
		snprintf(msg, sizeof(msg), "read %lld bytes but fstat says %lld", (long long)off, (long long)st.st_size);
		fail(path, msg);
		return -1;
	}
	sha_hex(&s, hex);
	return (long long)off;
}

static void *worker(void *arg)
{
	(void)arg;
	char *buf = malloc(chunk);
	if (buf == NULL) {
		fail("-", "out of memory");
		return NULL;
	}
	uint64_t mine = 0;
	for (;;) {
		pthread_mutex_lock(&mu);
		size_t k = next_item < npaths ? next_item++ : npaths;
		pthread_mutex_unlock(&mu);
		if (k == npaths)
			break;
		size_t i = order[k];
		char hex[65];
		long long n = read_file(paths[i], buf, hex);
		if (n < 0)
			continue;
		mine += (uint64_t)n;
		if (epoch_no == 1)
			memcpy(digest[i], hex, sizeof(hex)); /* each index has one writer per epoch */
		else if (strcmp(digest[i], hex) != 0)
			fail(paths[i], "bytes differ from the first epoch");
	}
	free(buf);
	pthread_mutex_lock(&mu);
	bytes_read += mine;
	pthread_mutex_unlock(&mu);
	return NULL;
}

static uint64_t rng_state;
static uint64_t rng(void) /* splitmix64 */
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void add_path(const char *p, size_t *cap)
{
	if (*p == 0)
		return;
	if (npaths == *cap) {
		*cap = *cap ? *cap * 2 : 1024;
		paths = realloc(paths, *cap * sizeof(*paths));
		if (paths == NULL) {
			perror("threaded_reader");
			exit(1);
		}
	}
	paths[npaths++] = strdup(p);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	int threads = 4, epochs = 1, verbose = 0, opt;
	unsigned long long seed = 1;
	while ((opt = getopt(argc, argv, "t:c:e:s:vh")) != -1) {
		switch (opt) {
		case 't': threads = atoi(optarg); break;
		case 'c': chunk = (size_t)strtoull(optarg, NULL, 0); break;
		case 'e': epochs = atoi(optarg); break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'v': verbose = 1; break;
		default:
			fprintf(stderr, "usage: %s [-t threads] [-c chunk] [-e epochs] [-s seed] [-v] [FILE...] (or a list on stdin)\n",
				argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (threads < 1 || threads > 1024 || chunk < 1 || epochs < 1) {
		fprintf(stderr, "threaded_reader: -t 1..1024, -c >= 1, -e >= 1\n");
		return 2;
	}
	size_t cap = 0;
	if (optind < argc) {
		for (int i = optind; i < argc; i++)
			add_path(argv[i], &cap);
	} else {
		char *line = NULL;
		size_t len = 0;
		ssize_t n;
		while ((n = getline(&line, &len, stdin)) > 0) {
			if (line[n - 1] == '\n')
				line[n - 1] = 0;
			add_path(line, &cap);
		}
		free(line);
	}
	if (npaths == 0) {
		fprintf(stderr, "threaded_reader: no files given\n");
		return 2;
	}
	order = malloc(npaths * sizeof(*order));
	digest = calloc(npaths, sizeof(*digest));
	pthread_t *tid = malloc((size_t)threads * sizeof(*tid));
	if (order == NULL || digest == NULL || tid == NULL) {
		perror("threaded_reader");
		return 1;
	}
	rng_state = seed;
	for (epoch_no = 1; epoch_no <= epochs; epoch_no++) {
		for (size_t i = 0; i < npaths; i++)
			order[i] = i;
		for (size_t i = npaths - 1; seed && i > 0; i--) { /* Fisher-Yates */
			size_t j = (size_t)(rng() % (i + 1)), t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		next_item = 0;
		bytes_read = 0;
		double t0 = now();
		int started = 0;
		for (int t = 0; t < threads; t++) {
			if (pthread_create(&tid[t], NULL, worker, NULL) != 0) {
				fail("-", "cannot create a thread");
				break;
			}
			started++;
		}
		for (int t = 0; t < started; t++)
			pthread_join(tid[t], NULL);
		double dt = now() - t0;
		printf("epoch %d: %zu files, %llu bytes, %.3f s, %.1f MB/s, %.0f files/s\n", epoch_no, npaths,
		       (unsigned long long)bytes_read, dt, dt > 0 ? (double)bytes_read / dt / 1e6 : 0.0,
		       dt > 0 ? (double)npaths / dt : 0.0);
		fflush(stdout);
	}
	/* checksum = sha256 of the `sha256sum FILE...` text, in list order */
	struct sha256 all;
	sha_init(&all);
	for (size_t i = 0; i < npaths; i++) {
		if (digest[i][0] == 0)
			continue; /* unreadable: already reported */
		if (verbose)
			printf("%s  %s\n", digest[i], paths[i]);
		sha_update(&all, digest[i], 64);
		sha_update(&all, "  ", 2);
		sha_update(&all, paths[i], strlen(paths[i]));
		sha_update(&all, "\n", 1);
	}
	char hex[65];
	sha_hex(&all, hex);
	printf("checksum %s\n", hex);
	if (errors)
		fprintf(stderr, "threaded_reader: %d error(s)\n", errors);
	return errors ? 1 : 0;
}
