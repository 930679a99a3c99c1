/* Crash reports under test: reads a file (so a shim is active and, with a
 * root set, routed), then dies the way argv[1] says: segv, bus, abort, or
 * "handled" (its own SIGSEGV handler must run, not the shim's). */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void own_handler(int sig)
{
	(void)sig;
	static const char msg[] = "crash_probe: own handler ran\n";
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	_exit(42);
}

/* Kept out of line so the backtrace names it. */
__attribute__((noinline)) static void probe_fault(const char *how)
{
	if (strcmp(how, "segv") == 0 || strcmp(how, "handled") == 0) {
		volatile uintptr_t addr = 16; /* unmapped; volatile hides it from the compiler */
		*(volatile int *)addr = 1;
	} else if (strcmp(how, "bus") == 0) {
		/* A mapping past the end of an empty file: SIGBUS on touch. */
		FILE *f = tmpfile();
		volatile char *m = f ? mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fileno(f), 0) : NULL;
		if (m == NULL || m == MAP_FAILED)
			exit(4);
		(void)m[0];
	} else if (strcmp(how, "abort") == 0) {
		abort();
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: crash_probe segv|bus|abort|handled FILE\n");
		return 2;
	}
	if (strcmp(argv[1], "handled") == 0)
		signal(SIGSEGV, own_handler);
	int fd = open(argv[2], O_RDONLY);
	char buf[256];
	if (fd < 0 || read(fd, buf, sizeof(buf)) < 0)
		return 5;
	close(fd);
	printf("read ok\n");
	fflush(stdout);
	probe_fault(argv[1]);
	return 0;
}
