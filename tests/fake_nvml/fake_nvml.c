/* A stand-in for libnvidia-ml.so.1 so the real nvidia-ml-py code path runs without a GPU.
 *
 * Devices and processes come from the file named by FAKE_NVML_CONFIG, re-read on every call so
 * a test can change them while a sidecar samples. Lines:
 *   device UTIL MEM_USED MEM_TOTAL POWER_MW TEMP_C SM_MHZ FLAGS
 *   proc DEVICE PID USED_BYTES KIND SM_UTIL        (KIND: c compute, g graphics)
 * PID is returned as written, as the real driver returns the pid in the host's (root) pid
 * namespace whatever namespace the caller is in: a test of a sidecar in a pid namespace of its
 * own (a container) writes the host's pids of its processes here (NSpid's first entry).
 * FLAGS is "-" or letters: L lost, P power unsupported, T temperature unsupported,
 * U process utilization unsupported. A first line "nodriver" makes init fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXDEV 8
#define MAXPROC 64

typedef struct { unsigned util; unsigned long long used, total; unsigned power, temp, sm; char flags[16]; } dev_t_;
typedef struct { unsigned dev, pid; unsigned long long used; char kind; unsigned sm; } proc_t_;
typedef struct { unsigned gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned pid; unsigned long long used; unsigned gi, ci; } pinfo_t;
typedef struct { unsigned pid; unsigned long long ts; unsigned sm, mem, enc, dec; } psample_t;

static dev_t_ devs[MAXDEV];
static proc_t_ procs[MAXPROC];
static int ndev, nproc, nodriver;

static void load(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    char line[256];
    FILE *f;
    ndev = nproc = nodriver = 0;
    if (!path || !(f = fopen(path, "r"))) return;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "nodriver", 8)) nodriver = 1;
        else if (!strncmp(line, "device", 6) && ndev < MAXDEV) {
            dev_t_ *d = &devs[ndev];
            if (sscanf(line, "device %u %llu %llu %u %u %u %15s", &d->util, &d->used, &d->total,
                       &d->power, &d->temp, &d->sm, d->flags) == 7) ndev++;
        } else if (!strncmp(line, "proc", 4) && nproc < MAXPROC) {
            proc_t_ *p = &procs[nproc];
            if (sscanf(line, "proc %u %u %llu %c %u", &p->dev, &p->pid, &p->used, &p->kind, &p->sm) == 5) nproc++;
        }
    }
    fclose(f);
}

static int flag(int i, char c) { return strchr(devs[i].flags, c) != NULL; }

/* Handles are 1 + device index. Returns the index, or -1 with *ret set. */
static int dev(void *h, int *ret) {
    long i = (long)h - 1;
    load();
    if (i < 0 || i >= ndev) { *ret = 2; return -1; }          /* INVALID_ARGUMENT */
    if (flag(i, 'L')) { *ret = 15; return -1; }                /* GPU_IS_LOST */
    *ret = 0;
    return (int)i;
}

int nvmlInitWithFlags(unsigned flags) { (void)flags; load(); return nodriver ? 9 : 0; }
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) {
    switch (r) {
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    default: return "Fake NVML error";
    }
}
int nvmlSystemGetDriverVersion(char *buf, unsigned n) { snprintf(buf, n, "999.0-fake"); return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { load(); *n = ndev; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) {
    load();
    if (i >= (unsigned)ndev) return 2;
    *h = (void *)(long)(i + 1);
    return 0;
}
int nvmlDeviceGetName(void *h, char *buf, unsigned n) {
    int r, i = dev(h, &r);
    if (i < 0) return r;
    snprintf(buf, n, "Fake GPU %d", i);
    return 0;
}
int nvmlDeviceGetUtilizationRates(void *h, util_t *u) {
    int r, i = dev(h, &r);
    if (i < 0) return r;
    u->gpu = devs[i].util; u->memory = devs[i].util / 2;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) {
    int r, i = dev(h, &r);
    if (i < 0) return r;
    m->total = devs[i].total; m->used = devs[i].used; m->free = devs[i].total - devs[i].used;
    return 0;
}
int nvmlDeviceGetPowerUsage(void *h, unsigned *mw) {
    int r, i = dev(h, &r);
    if (i < 0) return r;
    if (flag(i, 'P')) return 3;
    *mw = devs[i].power;
    return 0;
}
int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *t) {
    int r, i = dev(h, &r);
    (void)sensor;
    if (i < 0) return r;
    if (flag(i, 'T')) return 3;
    *t = devs[i].temp;
    return 0;
}
int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz) {
    int r, i = dev(h, &r);
    (void)type;
    if (i < 0) return r;
    *mhz = devs[i].sm;
    return 0;
}
static int running(void *h, unsigned *count, pinfo_t *out, char kind) {
    int r, i = dev(h, &r), n = 0, k;
    if (i < 0) return r;
    for (k = 0; k < nproc; k++) if (procs[k].dev == (unsigned)i && procs[k].kind == kind) n++;
    if (!out || *count < (unsigned)n) { *count = n; return n ? 7 : 0; }  /* INSUFFICIENT_SIZE */
    n = 0;
    for (k = 0; k < nproc; k++)
        if (procs[k].dev == (unsigned)i && procs[k].kind == kind) {
            out[n].pid = procs[k].pid; out[n].used = procs[k].used;
            out[n].gi = out[n].ci = 0xFFFFFFFF;
            n++;
        }
    *count = n;
    return 0;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned *c, pinfo_t *o) { return running(h, c, o, 'c'); }
int nvmlDeviceGetGraphicsRunningProcesses_v3(void *h, unsigned *c, pinfo_t *o) { return running(h, c, o, 'g'); }
int nvmlDeviceGetProcessUtilization(void *h, psample_t *out, unsigned *count, unsigned long long since) {
    int r, i = dev(h, &r), n = 0, k;
    (void)since;
    if (i < 0) return r;
    if (flag(i, 'U')) return 3;
    for (k = 0; k < nproc; k++) if (procs[k].dev == (unsigned)i) n++;
    if (!out || *count < (unsigned)n) { *count = n; return 7; }
    n = 0;
    for (k = 0; k < nproc; k++)
        if (procs[k].dev == (unsigned)i) {
            out[n].pid = procs[k].pid; out[n].ts = 1; out[n].sm = procs[k].sm;
            out[n].mem = out[n].enc = out[n].dec = 0;
            n++;
        }
    *count = n;
    return 0;
}
