/* Replay driver for the libFuzzer targets without libFuzzer: link it with one
 * tests/fuzz/fuzz_*.c and run
 *
 *     replay [-m N] [-s SEED] PATH...
 *
 * Every PATH that is a directory contributes each regular file in it (sorted
 * by name, not recursive); a file is taken as is. Each input is handed to
 * LLVMFuzzerTestOneInput in a heap block of exactly its size, so an ASan
 * build catches any read past the end. With -m N, every input is also
 * replayed N times with deterministic pseudo-random mutations (bit flips,
 * byte overwrites with interesting values, truncations, insertions,
 * duplicated ranges): a cheap, reproducible fuzz pass for gcc builds.
 *
 * Exit status: 0 when every input ran (a failing check aborts), 2 on usage
 * errors or when no input was found at all (an empty corpus is an error,
 * so a broken path cannot pass silently).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void run_one(const uint8_t *data, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1);
	if (copy == NULL) {
		perror("malloc");
		exit(2);
	}
	if (size)
		memcpy(copy, data, size);
	LLVMFuzzerTestOneInput(copy, size);
	free(copy);
}

static void mutate_and_run(const uint8_t *data, size_t size)
{
	static const uint8_t interesting[] = {0x00, 0x01, 0x02, 0x7f, 0x80, 0xff, '/', '.', ',', '%', 'G', '0', '9'};
	size_t cap = size + 64;
	uint8_t *b = malloc(cap);
	if (b == NULL) {
		perror("malloc");
		exit(2);
	}
	memcpy(b, data, size);
	size_t n = size;
	int steps = 1 + (int)(rnd() % 4);
	for (int s = 0; s < steps; s++) {
		switch (rnd() % 6) {
		case 0: /* flip a bit */
			if (n)
				b[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
			break;
		case 1: /* interesting byte */
			if (n)
				b[rnd() % n] = interesting[rnd() % sizeof interesting];
			break;
		case 2: /* truncate */
			if (n)
				n = rnd() % n;
			break;
		case 3: /* insert a byte */
			if (n < cap) {
				size_t at = n ? rnd() % (n + 1) : 0;
				memmove(b + at + 1, b + at, n - at);
				b[at] = interesting[rnd() % sizeof interesting];
				n++;
			}
			break;
		case 4: /* overwrite 4 bytes with a random 32-bit value */
			if (n >= 4) {
				uint32_t v = (uint32_t)rnd();
				memcpy(b + rnd() % (n - 3), &v, 4);
			}
			break;
		default: /* duplicate a short range at the end */
			if (n && n < cap) {
				size_t from = rnd() % n, len = 1 + rnd() % 16;
				if (len > n - from)
					len = n - from;
				if (len > cap - n)
					len = cap - n;
				memmove(b + n, b + from, len);
				n += len;
			}
			break;
		}
	}
	run_one(b, n);
	free(b);
}

static long run_file(const char *path, long mutations)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		exit(2);
	}
	size_t cap = 4096, n = 0;
	uint8_t *buf = malloc(cap);
	size_t got;
	while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap) {
			uint8_t *nb = realloc(buf, cap * 2);
			if (nb == NULL)
				break;
			buf = nb;
			cap *= 2;
		}
	}
	fclose(f);
	if (buf == NULL) {
		perror("malloc");
		exit(2);
	}
	run_one(buf, n);
	for (long i = 0; i < mutations; i++)
		mutate_and_run(buf, n);
	free(buf);
	return 1;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static long run_dir(const char *dir, long mutations)
{
	DIR *d = opendir(dir);
	if (d == NULL) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		exit(2);
	}
	char **names = NULL;
	size_t nn = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (nn == cap) {
			cap = cap ? cap * 2 : 64;
			char **nb = realloc(names, cap * sizeof(*names));
			if (nb == NULL) {
				perror("realloc");
				exit(2);
			}
			names = nb;
		}
		names[nn++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(names, nn, sizeof(*names), cmp_names);
	long count = 0;
	for (size_t i = 0; i < nn; i++) {
		char path[4096];
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
			count += run_file(path, mutations);
		free(names[i]);
	}
	free(names);
	return count;
}

int main(int argc, char **argv)
{
	long mutations = 0, count = 0;
	int opt;

	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	while ((opt = getopt(argc, argv, "m:s:")) != -1) {
		switch (opt) {
		case 'm': mutations = strtol(optarg, NULL, 10); break;
		case 's': rng_state = strtoull(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: %s [-m mutations] [-s seed] CORPUS_DIR|FILE...\n", argv[0]);
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: %s [-m mutations] [-s seed] CORPUS_DIR|FILE...\n", argv[0]);
		return 2;
	}
	for (int i = optind; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 2;
		}
		count += S_ISDIR(st.st_mode) ? run_dir(argv[i], mutations) : run_file(argv[i], mutations);
	}
	if (count == 0) {
		fprintf(stderr, "replay: no inputs found\n");
		return 2;
	}
	printf("replay: %ld input(s), %ld mutation(s) each: ok\n", count, mutations);
	return 0;
}
