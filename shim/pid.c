/* The process id without a system call on the hot path. A system call
 * costs a microsecond or more on a VM, and a redirected HDF5 row read
 * needs the pid once (is this still the process that opened the
 * connections?). glibc no longer caches getpid, because a child made by a
 * raw clone would see its parent's. Here the cache lives in a page marked
 * MADV_WIPEONFORK: the kernel hands every child (fork, or clone without
 * CLONE_VM) that page zeroed, whoever created it, so a child never reads
 * its parent's value. Without that madvise (Linux before 4.14) every call
 * asks the kernel. A vfork child shares our memory and sees the parent's
 * pid, as with any cache; it may only exec or _exit anyway. */
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shim.h"

struct pid_page {
	_Atomic int set;          /* 0 in a new process: the page was wiped */
	pid_t pid;
};

static struct pid_page *_Atomic page; /* NULL: not made yet; MAP_FAILED: no wipe-on-fork here */

static struct pid_page *pid_page(void)
{
	struct pid_page *p = atomic_load_explicit(&page, memory_order_acquire);
	if (p)
		return p;
	void *m = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m != MAP_FAILED && madvise(m, (size_t)sysconf(_SC_PAGESIZE), MADV_WIPEONFORK) != 0) {
		munmap(m, (size_t)sysconf(_SC_PAGESIZE));
		m = MAP_FAILED;
	}
	struct pid_page *none = NULL;
	if (!atomic_compare_exchange_strong(&page, &none, (struct pid_page *)m)) {
		if (m != MAP_FAILED) /* another thread made one first */
			munmap(m, (size_t)sysconf(_SC_PAGESIZE));
		return none;
	}
	return m;
}

pid_t shim_pid(void)
{
	struct pid_page *p = pid_page();
	if (p == MAP_FAILED)
		return getpid();
	if (atomic_load_explicit(&p->set, memory_order_acquire))
		return p->pid;
	pid_t now = getpid();
	p->pid = now;
	atomic_store_explicit(&p->set, 1, memory_order_release);
	return now;
}
