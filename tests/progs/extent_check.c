/* Reads files through engine/daemon/extent_read.c and compares every byte
 * with an ordinary read of the same file.
 *
 *   extent_check FILE...
 *
 * Prints "available N", "done D of N", "device_bytes B file_bytes F runs R"
 * and one "MISMATCH path" line per file whose extent-read bytes differ;
 * exits 1 on any mismatch, 2 on usage or I/O errors. Files the extent path
 * declines are not a failure (they are read the ordinary way in dlshimd). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "extent_read.h"

struct bufs {
	uint8_t **b;
	uint64_t *size;
};

static int put(void *ctx, uint32_t i, uint64_t off, const void *buf, uint64_t len)
{
	struct bufs *x = ctx;
	if (off + len > x->size[i])
		return -1;
	memcpy(x->b[i] + off, buf, len);
	return 0;
}

int main(int argc, char **argv)
{
	uint32_t n = (uint32_t)(argc - 1);
	if (n == 0) {
		fprintf(stderr, "usage: extent_check FILE...\n");
		return 2;
	}
	int *fd = calloc(n, sizeof(*fd));
	uint64_t *size = calloc(n, sizeof(*size));
	uint8_t **b = calloc(n, sizeof(*b));
	uint8_t *done = calloc(n, 1);
	for (uint32_t i = 0; i < n; i++) {
		struct stat st;
		fd[i] = open(argv[i + 1], O_RDONLY | O_CLOEXEC);
		if (fd[i] < 0 || fstat(fd[i], &st) < 0) {
			perror(argv[i + 1]);
			return 2;
		}
		size[i] = (uint64_t)st.st_size;
		b[i] = calloc(size[i] + 1, 1);
	}
	struct stat st0;
	fstat(fd[0], &st0);
	printf("available %d\n", extent_read_available(st0.st_dev));
	struct bufs x = {b, size};
	struct extent_sink sink = {put, &x};
	struct extent_read_stats st = {0};
	uint32_t ndone = extent_read_batch(fd, size, n, &sink, done, &st);
	printf("done %u of %u\n", ndone, n);
	printf("device_bytes %llu file_bytes %llu runs %llu\n", (unsigned long long)st.device_bytes,
	       (unsigned long long)st.file_bytes, (unsigned long long)st.runs);
	int bad = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!done[i]) {
			printf("declined %s\n", argv[i + 1]);
			continue;
		}
		uint8_t *ref = malloc(size[i] + 1);
		ssize_t r = pread(fd[i], ref, size[i], 0);
		if (r != (ssize_t)size[i] || memcmp(ref, b[i], size[i]) != 0) {
			printf("MISMATCH %s\n", argv[i + 1]);
			bad = 1;
		}
		free(ref);
	}
	for (uint32_t i = 0; i < n; i++) {
		close(fd[i]);
		free(b[i]);
	}
	free(fd), free(size), free(b), free(done);
	return bad;
}
