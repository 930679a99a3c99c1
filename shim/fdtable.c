/* The table of routed descriptors: a flat array indexed by fd, so that the
 * question "is this fd mine?" costs one bounds check and one load. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "real.h"
#include "shim.h"

struct route *_Atomic *g_fdt;
atomic_int g_fdt_size;

static pthread_mutex_t fdt_mu = PTHREAD_MUTEX_INITIALIZER;
static struct route *free_routes;

#define FDT_MAX (1 << 20)

/* Called with fdt_mu held. The table is sized once from RLIMIT_NOFILE;
 * descriptors beyond it are never routed. */
static int fdt_ensure(void)
{
	if (g_fdt)
		return 0;
	struct rlimit rl;
	long n = 65536;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && (long)rl.rlim_max > n)
		n = (long)rl.rlim_max;
	if (n > FDT_MAX)
		n = FDT_MAX;
	void *p = mmap(NULL, (size_t)n * sizeof(struct route *), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	g_fdt = p;
	atomic_store_explicit(&g_fdt_size, (int)n, memory_order_release);
	return 0;
}

int fdt_set(int fd, struct route *r)
{
	int rc = -1;
	pthread_mutex_lock(&fdt_mu);
	if (fdt_ensure() == 0 && fd >= 0 && fd < atomic_load(&g_fdt_size)) {
		struct route *old = atomic_exchange(&g_fdt[fd], r);
		atomic_fetch_add(&r->refs, 1);
		rc = 0;
		pthread_mutex_unlock(&fdt_mu);
		if (old) /* a descriptor number reused without our close: drop the stale route */
			route_put(old);
		return rc;
	}
	pthread_mutex_unlock(&fdt_mu);
	return rc;
}

struct route *fdt_take(int fd)
{
	if ((unsigned)fd >= (unsigned)atomic_load(&g_fdt_size))
		return NULL;
	return atomic_exchange(&g_fdt[fd], NULL);
}

struct route *route_new(void)
{
	pthread_mutex_lock(&fdt_mu);
	struct route *r = free_routes;
	if (r)
		free_routes = r->next_free;
	pthread_mutex_unlock(&fdt_mu);
	if (r == NULL) {
		/* Routes are recycled, never freed: a reader racing a close on the
		 * same fd must not touch unmapped memory. */
		r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (r == MAP_FAILED)
			return NULL;
	}
	memset(r, 0, sizeof(*r));
	atomic_init(&r->refs, 1); /* the creator's reference */
	atomic_flag_clear(&r->cur_lock);
	return r;
}

void route_put(struct route *r)
{
	if (atomic_fetch_sub(&r->refs, 1) != 1)
		return;
	uint64_t bc = atomic_load(&r->bytes_cache), bp = atomic_load(&r->bytes_pass);
	/* Only the process that took the pin releases it: a forked child closing
	 * an inherited descriptor must not drop its parent's pin. */
	if (r->owner == getpid() && r->session == client_session_id())
		client_release(r, bc, bp);
	pthread_mutex_lock(&fdt_mu);
	r->next_free = free_routes;
	free_routes = r;
	pthread_mutex_unlock(&fdt_mu);
}

ssize_t route_read(struct route *r, uint64_t off, void *buf, size_t len)
{
	ssize_t n;
	if (!atomic_flag_test_and_set_explicit(&r->cur_lock, memory_order_acquire)) {
		n = dlshim_shm_read(r->view, r->slot, r->gen, off, buf, len, &r->cur);
		atomic_flag_clear_explicit(&r->cur_lock, memory_order_release);
	} else {
		n = dlshim_shm_read(r->view, r->slot, r->gen, off, buf, len, NULL);
	}
	if (n > 0)
		atomic_fetch_add_explicit(&r->bytes_cache, (unsigned long long)n, memory_order_relaxed);
	return n;
}

/* fork: the child must not inherit fdt_mu held by a thread that does not
 * exist there. */
void fdt_atfork_prepare(void) { pthread_mutex_lock(&fdt_mu); }
void fdt_atfork_parent(void) { pthread_mutex_unlock(&fdt_mu); }
void fdt_atfork_child(void) { pthread_mutex_init(&fdt_mu, NULL); }

/* At exit: release every route this process holds, so its pins and byte
 * counts reach the coordinator before the job's summary is written. */
void fdt_drop_all(void)
{
	int n = atomic_load(&g_fdt_size);
	for (int fd = 0; fd < n; fd++) {
		struct route *r = fdt_take(fd);
		if (r)
			route_put(r);
	}
}
