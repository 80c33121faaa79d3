/* A stand-in for libnvidia-ml.so.1 so the real nvidia-ml-py code path runs without a GPU.
 *
 * Devices and processes come from the file named by FAKE_NVML_CONFIG, re-read on every call so
 * a test can change them while a sidecar samples. Lines:
 *   device UTIL MEM_USED MEM_TOTAL POWER_MW TEMP_C SM_MHZ FLAGS
 *   proc DEVICE PID USED_BYTES KIND SM_UTIL [GI]   (KIND: c compute, g graphics; GI: the MIG
 *                                                  instance it runs on, if any)
 *   mig DEVICE GI MEM_USED MEM_TOTAL               (a MIG instance of DEVICE, in MIG mode)
 *   gpm DEVICE GI SM_ACTIVE OCCUPANCY TENSOR DRAM  (GPM metrics, in %; GI -1: the whole GPU)
 *   acct DEVICE PID GPU_UTIL MEM_UTIL MAX_MEM_BYTES TIME_MS   (accounting stats of a pid)
 *   xid DEVICE XID SEQ                             (an Xid event; each SEQ is delivered once)
 * PID is returned as written, as the real driver returns the pid in the host's (root) pid
 * namespace whatever namespace the caller is in: a test of a sidecar in a pid namespace of its
 * own (a container) writes the host's pids of its processes here (NSpid's first entry).
 * FLAGS is "-" or letters: L lost, P power unsupported, T temperature unsupported,
 * U process utilization unsupported (both APIs), N the newer nvmlDeviceGetProcessesUtilizationInfo
 * unsupported (the older one answers), F no process sample newer than asked (NOT_FOUND),
 * G GPM supported, A accounting on, M MIG mode on, X Xid events unsupported.
 * A first line "nodriver" makes init fail.
 *
 * Handles: a GPU's is 1 + its index; a MIG instance's is 1000 + 16 * GPU index + its order.
 * Process utilisation samples carry the time of the call (us): only those newer than the
 * timestamp asked for are returned, as NVML does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define MAXDEV 8
#define MAXPROC 64
#define MAXMIG 32
#define MAXGPM 32
#define MAXACCT 32
#define MAXXID 32
#define MIGBASE 1000

typedef struct { unsigned util; unsigned long long used, total; unsigned power, temp, sm; char flags[16]; } dev_t_;
typedef struct { unsigned dev, pid; unsigned long long used; char kind; unsigned sm; int gi; } proc_t_;
typedef struct { unsigned dev; int gi; unsigned long long used, total; } mig_t_;
typedef struct { unsigned dev; int gi; double sm, occ, tensor, dram; } gpm_t_;
typedef struct { unsigned dev, pid, util, mem; unsigned long long max, ms; } acct_t_;
typedef struct { unsigned dev; unsigned long long xid, seq; } xid_t_;
typedef struct { unsigned gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned pid; unsigned long long used; unsigned gi, ci; } pinfo_t;
typedef struct { unsigned pid; unsigned long long ts; unsigned sm, mem, enc, dec; } psample_t;
typedef struct { unsigned long long ts; unsigned pid, sm, mem, enc, dec, jpg, ofa; } pinfo2_t;
typedef struct { unsigned version, count; unsigned long long last_seen; pinfo2_t *array; } putil_t;
typedef struct { unsigned version, supported; } gpm_support_t;
typedef struct { char *short_name, *long_name, *unit; } metric_info_t;
typedef struct { unsigned id; int ret; double value; metric_info_t info; } gpm_metric_t;
typedef struct { int dev, gi; } gpm_sample_t;
typedef struct { unsigned version, count; gpm_sample_t *s1, *s2; gpm_metric_t metrics[477]; } gpm_get_t;
typedef struct { unsigned util, mem; unsigned long long max, time, start; unsigned running, reserved[5]; } acct_stats_t;
typedef struct { void *device; unsigned long long type, data; unsigned gi, ci; } event_t;

static dev_t_ devs[MAXDEV];
static proc_t_ procs[MAXPROC];
static mig_t_ migs[MAXMIG];
static gpm_t_ gpms[MAXGPM];
static acct_t_ accts[MAXACCT];
static xid_t_ xids[MAXXID];
static int ndev, nproc, nmig, ngpm, nacct, nxid, nodriver;
static unsigned long long xid_delivered;
static unsigned registered;  /* bit per GPU registered for Xid events */

static void load(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    char line[256];
    FILE *f;
    ndev = nproc = nmig = ngpm = nacct = nxid = nodriver = 0;
    if (!path || !(f = fopen(path, "r"))) return;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "nodriver", 8)) nodriver = 1;
        else if (!strncmp(line, "device", 6) && ndev < MAXDEV) {
            dev_t_ *d = &devs[ndev];
            if (sscanf(line, "device %u %llu %llu %u %u %u %15s", &d->util, &d->used, &d->total,
                       &d->power, &d->temp, &d->sm, d->flags) == 7) ndev++;
        } else if (!strncmp(line, "proc", 4) && nproc < MAXPROC) {
            proc_t_ *p = &procs[nproc];
            p->gi = -1;
            if (sscanf(line, "proc %u %u %llu %c %u %d", &p->dev, &p->pid, &p->used, &p->kind,
                       &p->sm, &p->gi) >= 5) nproc++;
        } else if (!strncmp(line, "mig", 3) && nmig < MAXMIG) {
            mig_t_ *m = &migs[nmig];
            if (sscanf(line, "mig %u %d %llu %llu", &m->dev, &m->gi, &m->used, &m->total) == 4) nmig++;
        } else if (!strncmp(line, "gpm", 3) && ngpm < MAXGPM) {
            gpm_t_ *g = &gpms[ngpm];
            if (sscanf(line, "gpm %u %d %lf %lf %lf %lf", &g->dev, &g->gi, &g->sm, &g->occ,
                       &g->tensor, &g->dram) == 6) ngpm++;
        } else if (!strncmp(line, "acct", 4) && nacct < MAXACCT) {
            acct_t_ *a = &accts[nacct];
            if (sscanf(line, "acct %u %u %u %u %llu %llu", &a->dev, &a->pid, &a->util, &a->mem,
                       &a->max, &a->ms) == 6) nacct++;
        } else if (!strncmp(line, "xid", 3) && nxid < MAXXID) {
            xid_t_ *x = &xids[nxid];
            if (sscanf(line, "xid %u %llu %llu", &x->dev, &x->xid, &x->seq) == 3) nxid++;
        }
    }
    fclose(f);
}

static int flag(int i, char c) { return strchr(devs[i].flags, c) != NULL; }

static unsigned long long now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
}

/* A MIG handle's instance (index into migs), or -1. */
static int mig_of(void *h) {
    long v = (long)h - MIGBASE, k, n = 0;
    if (v < 0) return -1;
    for (k = 0; k < nmig; k++)
        if (migs[k].dev == (unsigned)(v / 16) && n++ == v % 16) return (int)k;
    return -1;
}

/* A handle's GPU index (a MIG handle's parent), or -1 with *ret set. */
static int dev(void *h, int *ret) {
    long i = (long)h - 1;
    load();
    if ((long)h >= MIGBASE) {
        int m = mig_of(h);
        if (m < 0) { *ret = 2; return -1; }
        i = migs[m].dev;
    }
    if (i < 0 || i >= ndev) { *ret = 2; return -1; }          /* INVALID_ARGUMENT */
    if (flag(i, 'L')) { *ret = 15; return -1; }                /* GPU_IS_LOST */
    *ret = 0;
    return (int)i;
}

/* Like dev(), but a MIG handle answers NOT_SUPPORTED (a GPU-wide reading). */
static int whole(void *h, int *ret) {
    int i = dev(h, ret);
    if (i >= 0 && (long)h >= MIGBASE) { *ret = 3; return -1; }
    return i;
}

int nvmlInitWithFlags(unsigned flags) { (void)flags; load(); return nodriver ? 9 : 0; }
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) {
    switch (r) {
    case 3: return "Not Supported";
    case 6: return "Not Found";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
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
int nvmlDeviceGetUUID(void *h, char *buf, unsigned n) {
    int r, i = dev(h, &r), m;
    if (i < 0) return r;
    m = mig_of(h);
    if (m >= 0) snprintf(buf, n, "MIG-fake-%04d-%04d", i, migs[m].gi);
    else snprintf(buf, n, "GPU-fake-%04d", i);
    return 0;
}
int nvmlDeviceGetUtilizationRates(void *h, util_t *u) {
    int r, i = whole(h, &r);
    if (i < 0) return r;
    if (flag(i, 'M')) return 3;  /* not on a GPU in MIG mode */
    u->gpu = devs[i].util; u->memory = devs[i].util / 2;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) {
    int r, i = dev(h, &r), k = mig_of(h);
    if (i < 0) return r;
    if (k >= 0) { m->total = migs[k].total; m->used = migs[k].used; }
    else { m->total = devs[i].total; m->used = devs[i].used; }
    m->free = m->total - m->used;
    return 0;
}
int nvmlDeviceGetPowerUsage(void *h, unsigned *mw) {
    int r, i = whole(h, &r);
    if (i < 0) return r;
    if (flag(i, 'P')) return 3;
    *mw = devs[i].power;
    return 0;
}
int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *t) {
    int r, i = whole(h, &r);
    (void)sensor;
    if (i < 0) return r;
    if (flag(i, 'T')) return 3;
    *t = devs[i].temp;
    return 0;
}
int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz) {
    int r, i = whole(h, &r);
    (void)type;
    if (i < 0) return r;
    *mhz = devs[i].sm;
    return 0;
}
/* Whether process k runs on handle h: a GPU's lists hold all its processes, a MIG
 * instance's those on that instance. */
static int on(int k, int i, void *h) {
    int m = mig_of(h);
    if (procs[k].dev != (unsigned)i) return 0;
    return m < 0 || procs[k].gi == migs[m].gi;
}
static int running(void *h, unsigned *count, pinfo_t *out, char kind) {
    int r, i = dev(h, &r), n = 0, k;
    if (i < 0) return r;
    for (k = 0; k < nproc; k++) if (on(k, i, h) && procs[k].kind == kind) n++;
    if (!out || *count < (unsigned)n) { *count = n; return n ? 7 : 0; }  /* INSUFFICIENT_SIZE */
    n = 0;
    for (k = 0; k < nproc; k++)
        if (on(k, i, h) && procs[k].kind == kind) {
            out[n].pid = procs[k].pid; out[n].used = procs[k].used;
            out[n].gi = procs[k].gi < 0 ? 0xFFFFFFFF : (unsigned)procs[k].gi;
            out[n].ci = procs[k].gi < 0 ? 0xFFFFFFFF : 0;
            n++;
        }
    *count = n;
    return 0;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned *c, pinfo_t *o) { return running(h, c, o, 'c'); }
int nvmlDeviceGetGraphicsRunningProcesses_v3(void *h, unsigned *c, pinfo_t *o) { return running(h, c, o, 'g'); }

/* The processes with a utilisation sample newer than `since`, or -1 with *ret set. */
static int sampled(void *h, unsigned long long since, unsigned long long *ts, int *ret) {
    int i = whole(h, ret), n = 0, k;
    if (i < 0) return -1;
    if (flag(i, 'U') || flag(i, 'M')) { *ret = 3; return -1; }
    *ts = now_us();
    if (flag(i, 'F') || *ts <= since) { *ret = 6; return -1; }  /* NOT_FOUND */
    for (k = 0; k < nproc; k++) if (procs[k].dev == (unsigned)i) n++;
    if (!n) { *ret = 6; return -1; }
    return n;
}
int nvmlDeviceGetProcessUtilization(void *h, psample_t *out, unsigned *count, unsigned long long since) {
    int r, i, n, k;
    unsigned long long ts;
    n = sampled(h, since, &ts, &r);
    if (n < 0) return r;
    if (!out || *count < (unsigned)n) { *count = n; return 7; }
    i = (int)((long)h - 1);
    n = 0;
    for (k = 0; k < nproc; k++)
        if (procs[k].dev == (unsigned)i) {
            out[n].pid = procs[k].pid; out[n].ts = ts; out[n].sm = procs[k].sm;
            out[n].mem = out[n].enc = out[n].dec = 0;
            n++;
        }
    *count = n;
    return 0;
}
int nvmlDeviceGetProcessesUtilizationInfo(void *h, putil_t *info) {
    int r, i, n, k;
    unsigned long long ts;
    i = dev(h, &r);
    if (i >= 0 && flag(i, 'N')) return 3;
    n = sampled(h, info->last_seen, &ts, &r);
    if (n < 0) return r;
    if (!info->array || info->count < (unsigned)n) { info->count = n; return 7; }
    n = 0;
    for (k = 0; k < nproc; k++)
        if (procs[k].dev == (unsigned)i) {
            memset(&info->array[n], 0, sizeof info->array[n]);
            info->array[n].pid = procs[k].pid; info->array[n].ts = ts;
            info->array[n].sm = procs[k].sm;
            n++;
        }
    info->count = n;
    info->last_seen = ts;
    return 0;
}

/* MIG */
int nvmlDeviceGetMigMode(void *h, unsigned *current, unsigned *pending) {
    int r, i = whole(h, &r);
    if (i < 0) return r;
    *current = *pending = flag(i, 'M') ? 1 : 0;
    return 0;
}
int nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned *count) {
    int r, i = whole(h, &r);
    if (i < 0) return r;
    *count = flag(i, 'M') ? 7 : 0;
    return 0;
}
int nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned index, void **mig) {
    int r, i = whole(h, &r), k, n = 0;
    if (i < 0) return r;
    if (!flag(i, 'M')) return 3;
    for (k = 0; k < nmig; k++) if (migs[k].dev == (unsigned)i) n++;
    if (index >= (unsigned)n || index >= 16) return 6;
    *mig = (void *)(long)(MIGBASE + 16 * i + index);
    return 0;
}
int nvmlDeviceGetGpuInstanceId(void *h, unsigned *id) {
    int m;
    load();
    m = mig_of(h);
    if (m < 0) return 2;
    *id = (unsigned)migs[m].gi;
    return 0;
}

/* GPM */
int nvmlGpmQueryDeviceSupport(void *h, gpm_support_t *s) {
    int r, i = whole(h, &r);
    if (i < 0) return r;
    s->supported = flag(i, 'G') ? 1 : 0;
    return 0;
}
int nvmlGpmSampleAlloc(gpm_sample_t **s) { *s = calloc(1, sizeof **s); return *s ? 0 : 999; }
int nvmlGpmSampleFree(gpm_sample_t *s) { free(s); return 0; }
int nvmlGpmSampleGet(void *h, gpm_sample_t *s) {
    int r, i = whole(h, &r);
    if (i < 0) return r;
    if (!flag(i, 'G')) return 3;
    s->dev = i; s->gi = -1;
    return 0;
}
int nvmlGpmMigSampleGet(void *h, unsigned gi, gpm_sample_t *s) {
    int r, i = whole(h, &r);
    if (i < 0) return r;
    if (!flag(i, 'G') || !flag(i, 'M')) return 3;
    s->dev = i; s->gi = (int)gi;
    return 0;
}
int nvmlGpmMetricsGet(gpm_get_t *g) {
    int k, m;
    gpm_t_ *found = NULL;
    load();
    if (!g->s1 || !g->s2 || g->s1->dev != g->s2->dev || g->s1->gi != g->s2->gi) return 2;
    for (k = 0; k < ngpm; k++)
        if (gpms[k].dev == (unsigned)g->s1->dev && gpms[k].gi == g->s1->gi) found = &gpms[k];
    for (m = 0; m < (int)g->count && m < 477; m++) {
        gpm_metric_t *x = &g->metrics[m];
        x->ret = 0;
        if (!found) { x->ret = 3; x->value = 0; continue; }
        switch (x->id) {
        case 2: x->value = found->sm; break;       /* SM_UTIL */
        case 3: x->value = found->occ; break;      /* SM_OCCUPANCY */
        case 5: x->value = found->tensor; break;   /* ANY_TENSOR_UTIL */
        case 10: x->value = found->dram; break;    /* DRAM_BW_UTIL */
        default: x->ret = 3; x->value = 0;
        }
    }
    return 0;
}

/* Accounting */
int nvmlDeviceGetAccountingMode(void *h, int *mode) {
    int r, i = whole(h, &r);
    if (i < 0) return r;
    *mode = flag(i, 'A') ? 1 : 0;
    return 0;
}
int nvmlDeviceGetAccountingStats(void *h, unsigned pid, acct_stats_t *s) {
    int r, i = whole(h, &r), k;
    if (i < 0) return r;
    if (!flag(i, 'A')) return 3;
    for (k = 0; k < nacct; k++)
        if (accts[k].dev == (unsigned)i && accts[k].pid == pid) {
            memset(s, 0, sizeof *s);
            s->util = accts[k].util; s->mem = accts[k].mem; s->max = accts[k].max;
            s->time = accts[k].ms; s->running = 0;
            return 0;
        }
    return 6;
}

/* Events: one event set; each configured Xid of a registered GPU is delivered once. */
int nvmlEventSetCreate(void **set) { *set = (void *)1; xid_delivered = 0; registered = 0; return 0; }
int nvmlEventSetFree(void *set) { (void)set; return 0; }
int nvmlDeviceRegisterEvents(void *h, unsigned long long types, void *set) {
    int r, i = whole(h, &r);
    (void)set;
    if (i < 0) return r;
    if (flag(i, 'X')) return 3;
    if (types & 8ULL) registered |= 1u << i;
    return 0;
}
int nvmlEventSetWait_v2(void *set, event_t *e, unsigned timeout_ms) {
    int k, best = -1;
    (void)set; (void)timeout_ms;
    load();
    for (k = 0; k < nxid; k++)
        if (xids[k].seq > xid_delivered && (registered & (1u << xids[k].dev))
            && (best < 0 || xids[k].seq < xids[best].seq)) best = k;
    if (best < 0) return 10;  /* TIMEOUT */
    xid_delivered = xids[best].seq;
    e->device = (void *)(long)(xids[best].dev + 1);
    e->type = 8ULL;
    e->data = xids[best].xid;
    e->gi = e->ci = 0xFFFFFFFF;
    return 0;
}
