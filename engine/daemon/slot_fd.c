/* A descriptor for a file that exists here only in the cache (fetched from
 * a peer): the program must get a real descriptor of the file it is served
 * (fstat, mmap and reads the shim does not intercept), so the slot's bytes
 * are copied into a sealed memfd, reopened read-only. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "dlshim/shm.h"

int slot_memfd(uint32_t slot, uint64_t gen, uint64_t size, int64_t mtime_ns)
{
	/* A view of our own segment (attach only validates and records). */
	struct dlshim_shm_view view;
	if (dlshim_shm_attach(D.shm_base, D.shm_len, &view) < 0)
		return -1;
	int fd = memfd_create("dlshim-remote", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -1;
	static __thread char buf[256 * 1024];
	struct dlshim_shm_cursor cur = {0};
	uint64_t off = 0;
	while (off < size) {
		/* Generation-checked: a slot reused meanwhile fails the copy. */
		ssize_t n = dlshim_shm_read(&view, slot, gen, off, buf, sizeof(buf), &cur);
		if (n <= 0 || pwrite(fd, buf, (size_t)n, (off_t)off) != n) {
			close(fd);
			return -1;
		}
		off += (uint64_t)n;
	}
	struct timespec ts[2] = {{0, UTIME_OMIT}, {mtime_ns / 1000000000LL, mtime_ns % 1000000000LL}};
	futimens(fd, ts); /* the home's mtime, for programs that look at it */
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	int ro = open(proc, O_RDONLY | O_CLOEXEC);
	close(fd);
	return ro;
}
