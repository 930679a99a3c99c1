/* Which RDMA (verbs) devices this machine has, for `dlshim status`: tells a
 * user whether UCX could use RDMA at all. libibverbs is loaded at run time,
 * so a machine without it still runs the coordinator. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "peer_module.h"

static char names[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void probe(void)
{
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		return;
	/* Only the device list is needed: opaque pointers, names by accessor. */
	void **(*get_list)(int *) = (void **(*)(int *))dlsym(h, "ibv_get_device_list");
	void (*free_list)(void **) = (void (*)(void **))dlsym(h, "ibv_free_device_list");
	const char *(*get_name)(void *) = (const char *(*)(void *))dlsym(h, "ibv_get_device_name");
	if (get_list && free_list && get_name) {
		int n = 0;
		void **list = get_list(&n);
		size_t len = 0;
		for (int i = 0; list && i < n && len + 2 < sizeof(names); i++) {
			const char *nm = get_name(list[i]);
			int w = snprintf(names + len, sizeof(names) - len, "%s%s", len ? "," : "", nm ? nm : "?");
			if (w < 0 || (size_t)w >= sizeof(names) - len)
				break;
			len += (size_t)w;
		}
		if (list)
			free_list(list);
	}
	/* Kept loaded: UCX may use it too. */
}

const char *rdma_devices(void)
{
	pthread_once(&once, probe);
	return names;
}
