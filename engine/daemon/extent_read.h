/* Extent reads (extent_read.c): a chunk of files loaded with a few large
 * direct reads of the block device. */
#ifndef DLSHIM_EXTENT_READ_H
#define DLSHIM_EXTENT_READ_H

#include <stdint.h>
#include <sys/types.h>

/* Where the bytes of file `i` at offset `off` go; 0 or -1. */
struct extent_sink {
	int (*put)(void *ctx, uint32_t i, uint64_t off, const void *buf, uint64_t len);
	void *ctx;
};

struct extent_read_stats {
	uint64_t files, file_bytes; /* files loaded this way and their sizes */
	uint64_t runs, device_bytes; /* device reads and the bytes they read */
};

/* Read the files fd[0..n) (expected sizes size[]) through their extents.
 * done[i] is set for each file whose every byte went to the sink and which
 * did not change meanwhile; the others must be read the ordinary way.
 * Returns how many are done (0 when the device cannot be opened). Thread-safe;
 * stats are the caller's. */
uint32_t extent_read_batch(const int *fd, const uint64_t *size, uint32_t n, const struct extent_sink *sink,
			   uint8_t *done, struct extent_read_stats *stats);
/* Whether files on `dev` can be read this way (opens the device once). */
int extent_read_available(dev_t dev);
void extent_read_disable(void);

#endif
