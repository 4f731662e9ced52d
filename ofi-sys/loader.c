/* libfabric is not linked: it is opened at the first call of one of the five functions it
 * exports that onesided uses (everything else of its API is a static inline function of the
 * headers that calls through the objects' operation tables, compiled in static_fns.c).
 *
 * Why: a process has one libfabric. An MPI library that bundles its own (MPICH 5 from PyPI
 * ships libfabric 2.x) loads it before anything of ours runs; a DT_NEEDED on the system's
 * libfabric.so.1 would load a second, older one first and break that MPI ("version
 * FABRIC_1.9 not found"). So the library already in the process is taken when there is one
 * (RTLD_NOLOAD matches it by soname), else the system's, and its API version must be at
 * least the one these bindings were generated against (1.17).
 *
 * Each symbol is looked up at the version the headers' declarations bind to at link time
 * (libfabric keeps older versions of fi_getinfo & co. for binaries of older struct layouts):
 * dlsym alone would take the newest default, whose layout may differ from the headers'.
 *
 * Everything here has hidden visibility: the definitions satisfy the bindings' references
 * inside the library or program that links this object and are never exported, so they
 * can never interpose on the process's libfabric for anyone else. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#pragma GCC visibility push(hidden)
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

/* The oldest libfabric API these bindings accept (the version ofi-sys is generated with). */
#define ONESIDED_FI_MIN_VERSION FI_VERSION(1, 17)

static struct {
    uint32_t (*version)(void);
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                   struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
} lib;

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Why libfabric could not be used; empty when it was loaded. */
static char failure[512];
/* 1 when libfabric was already in the process, 2 when we opened it, 0 when not loaded. */
static int origin;

static void *symbol(void *handle, const char *name, const char *version) {
    void *f = dlvsym(handle, name, version);
    if (f == NULL && failure[0] == '\0')
        snprintf(failure, sizeof failure, "libfabric.so.1 has no %s@%s", name, version);
    return f;
}

static void load(void) {
    void *handle = dlopen("libfabric.so.1", RTLD_NOW | RTLD_NOLOAD);
    origin = 1;
    if (handle == NULL) {
        handle = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
        origin = 2;
    }
    if (handle == NULL) {
        const char *why = dlerror();
        snprintf(failure, sizeof failure, "libfabric.so.1 could not be loaded (%s)",
                 why ? why : "not found");
        origin = 0;
        return;
    }
    lib.version = symbol(handle, "fi_version", "FABRIC_1.0");
    lib.getinfo = symbol(handle, "fi_getinfo", "FABRIC_1.3");
    lib.freeinfo = symbol(handle, "fi_freeinfo", "FABRIC_1.3");
    lib.dupinfo = symbol(handle, "fi_dupinfo", "FABRIC_1.3");
    lib.fabric = symbol(handle, "fi_fabric", "FABRIC_1.1");
    lib.strerror = symbol(handle, "fi_strerror", "FABRIC_1.0");
    if (failure[0] == '\0' && lib.version() < ONESIDED_FI_MIN_VERSION) {
        uint32_t v = lib.version();
        snprintf(failure, sizeof failure,
                 "the process's libfabric has API %u.%u; onesided needs %u.%u or later",
                 FI_MAJOR(v), FI_MINOR(v), FI_MAJOR(ONESIDED_FI_MIN_VERSION),
                 FI_MINOR(ONESIDED_FI_MIN_VERSION));
    }
    if (failure[0] != '\0')
        origin = 0;
}

/* 1 when libfabric is usable. */
static int loaded(void) {
    pthread_once(&once, load);
    return failure[0] == '\0';
}

/* Why libfabric cannot be used (NULL when it can); loads it on the first call. */
const char *onesided_fi_load_failure(void) { return loaded() ? NULL : failure; }

/* The API version of the loaded libfabric (0 when none could be loaded). */
uint32_t onesided_fi_loaded_version(void) { return loaded() ? lib.version() : 0; }

/* 1 when the loaded libfabric was already in the process, 2 when onesided opened it. */
int onesided_fi_origin(void) {
    loaded();
    return origin;
}

uint32_t fi_version(void) { return loaded() ? lib.version() : 0; }

int fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
               const struct fi_info *hints, struct fi_info **info) {
    if (!loaded())
        return -FI_ENOSYS;
    return lib.getinfo(version, node, service, flags, hints, info);
}

void fi_freeinfo(struct fi_info *info) {
    if (loaded())
        lib.freeinfo(info);
}

struct fi_info *fi_dupinfo(const struct fi_info *info) {
    return loaded() ? lib.dupinfo(info) : NULL;
}

int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context) {
    if (!loaded())
        return -FI_ENOSYS;
    return lib.fabric(attr, fabric, context);
}

const char *fi_strerror(int errnum) {
    if (!loaded())
        return failure;
    return lib.strerror(errnum);
}
#pragma GCC visibility pop
