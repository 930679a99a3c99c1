/* Finds the HDF5 library the process itself loaded (h5py loads it with
 * RTLD_LOCAL, out of RTLD_NEXT's reach): walk the loaded objects, take the
 * first whose dependency tree defines an H5Dread other than ours, and
 * resolve everything from that same handle. RTLD_NOLOAD: never a second
 * copy of libhdf5. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

#include "h5real.h"
#include "shim.h"

int H5Dread(h5id, h5id, h5id, h5id, h5id, void *);

static struct h5_fns fns;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int find_cb(struct dl_phdr_info *info, size_t size, void *out)
{
	(void)size;
	const char *name = info->dlpi_name;
	if (name == NULL || name[0] == 0)
		return 0; /* the executable: its global scope starts with the shim */
	void *h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL)
		return 0;
	void *f = dlsym(h, "H5Dread");
	if (f == NULL || f == (void *)H5Dread) {
		dlclose(h);
		return 0;
	}
	*(void **)out = h; /* kept open: the process's HDF5 stays loaded while we use it */
	return 1;
}

#define SYM(field, name) (*(void **)&fns.field = dlsym(h, name)) != NULL

static void resolve(void)
{
	g_in_shim++;
	void *h = NULL;
	dl_iterate_phdr(find_cb, &h);
	if (h) {
		*(void **)&fns.Dread = dlsym(h, "H5Dread");
		int (*ver)(unsigned *, unsigned *, unsigned *) = (int (*)(unsigned *, unsigned *, unsigned *))dlsym(h, "H5get_libversion");
		unsigned maj = 0, min = 0, rel = 0;
		int ok = ver && ver(&maj, &min, &rel) >= 0 && (maj > 1 || (maj == 1 && min >= 10));
		ok = ok && SYM(Fget_name, "H5Fget_name") && SYM(Iget_name, "H5Iget_name") &&
		     SYM(Iget_file_id, "H5Iget_file_id") && SYM(Fget_intent, "H5Fget_intent") && SYM(Fclose, "H5Fclose") &&
		     SYM(Dget_space, "H5Dget_space") && SYM(Dget_type, "H5Dget_type") && SYM(Sclose, "H5Sclose") &&
		     SYM(Tclose, "H5Tclose") && SYM(Sget_simple_extent_dims, "H5Sget_simple_extent_dims") &&
		     SYM(Sget_select_npoints, "H5Sget_select_npoints") && SYM(Sget_select_bounds, "H5Sget_select_bounds") &&
		     SYM(Tequal, "H5Tequal") && SYM(Tget_class, "H5Tget_class") && SYM(Tget_size, "H5Tget_size") &&
		     SYM(Eget_auto2, "H5Eget_auto2") && SYM(Eset_auto2, "H5Eset_auto2") &&
		     SYM(Pget_data_transform, "H5Pget_data_transform") && SYM(Scopy, "H5Scopy") &&
		     SYM(Sselect_hyperslab, "H5Sselect_hyperslab") && SYM(Iis_valid, "H5Iis_valid") &&
		     SYM(Fget_access_plist, "H5Fget_access_plist") && SYM(Pget_driver, "H5Pget_driver") &&
		     SYM(Pclose, "H5Pclose") && SYM(FD_sec2_init, "H5FD_sec2_init") &&
		     SYM(Fget_vfd_handle, "H5Fget_vfd_handle");
		fns.usable = ok;
		if (!ok)
			shim_debug("HDF5 %u.%u.%u: not usable for row caching; H5Dread passes through", maj, min, rel);
	}
	g_in_shim--;
}

const struct h5_fns *h5_real(void)
{
	pthread_once(&once, resolve);
	return &fns;
}
