/* _fastspan: the C fast path of workerscope's span recorder (see recorder.py).
 *
 * A wrapper type for sync functions (Timed, called through vectorcall) and span()'s context
 * manager write their records straight into the mapped ring: a record when the span begins
 * (seq from an atomic add on the header's counter, stored last), its end patched in when it
 * ends. Everything rarer goes back to Python through hooks: names and thread names (once per
 * ring), attributes and exceptions (the ring's extras), async spans.
 *
 * The ring's layout is workerscope/spanring.py's; LAYOUT must equal spanring.VERSION, or
 * recorder.py does not use this module. Every write happens with the GIL held, so this
 * process's writers never race each other; the reader is another process (the sidecar).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LAYOUT 3
#define H_COUNTER 3
#define RECORD_WORDS 6
#define F_END 4
#define F_CPU 8
#define ERR_BIT ((int64_t)1 << 62)
#define GEN_SHIFT 40
#define SEQ_MASK (((int64_t)1 << GEN_SHIFT) - 1)

/* The ring this process writes to (g_hdr NULL: none). g_active: a monitor is active. */
static Py_buffer g_view;
static int g_have_view;
static int64_t *g_hdr, *g_rec;
static uint64_t g_mask, g_cap;
static int64_t g_gen;
static int g_active;
static int g_cpu; /* the span_cpu setting of the ring: thread CPU read at each sync span's edges */
static long g_async_open;
static PyObject *g_intern, *g_thread, *g_error, *g_attrs, *g_async_span, *g_ctxvar,
    *g_running_loop, *g_reduce;
static PyObject *g_names; /* span() names -> their id in the current ring */
static PyObject *g_nospan;

/* Per thread: the ring whose names table has this thread's name, the kernel tid, the depth
 * of sync spans open. After fork the child's thread is new to the kernel. */
static __thread int64_t tl_gen, tl_tid, tl_depth;

static void
after_fork_child(void)
{
    tl_gen = 0;
    tl_tid = 0;
    g_active = 0; /* until recorder.py gives the child its own ring */
}

static inline int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* This thread's CPU time (ns), -1 if unreadable. A system call (~0.2 us here; the vDSO has
 * no thread clocks): paid only with span_cpu. */
static inline int64_t
thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Call a hook; its failure is never the job's: cleared. Returns the result or NULL. */
static PyObject *
call_hook(PyObject *hook, PyObject *const *args, size_t n)
{
    if (hook == NULL)
        return NULL;
    PyObject *res = PyObject_Vectorcall(hook, args, n, NULL);
    if (res == NULL)
        PyErr_Clear();
    return res;
}

static void
thread_ready(void)
{
    if (tl_gen == g_gen)
        return;
    if (!tl_tid)
        tl_tid = (int64_t)syscall(SYS_gettid);
    tl_gen = g_gen;
    PyObject *tid = PyLong_FromLongLong(tl_tid);
    if (tid == NULL) {
        PyErr_Clear();
        return;
    }
    Py_XDECREF(call_hook(g_thread, &tid, 1));
    Py_DECREF(tid);
}

static uint32_t
intern_name(PyObject *name, PyObject *attrs)
{
    PyObject *args[2] = {name, attrs ? attrs : Py_None};
    PyObject *res = call_hook(g_intern, args, 2);
    if (res == NULL)
        return 0;
    long nid = PyLong_AsLong(res);
    Py_DECREF(res);
    if (nid < 0 || nid > 0xFFFFFFFFL) {
        PyErr_Clear();
        return 0;
    }
    return (uint32_t)nid;
}

/* The seq of the async span enclosing this code in its task (0: none, or another ring's). */
static int64_t
current_ctx(void)
{
    if (!g_async_open || g_ctxvar == NULL)
        return 0;
    PyObject *v = NULL;
    if (PyContextVar_Get(g_ctxvar, NULL, &v) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (v == NULL)
        return 0;
    int64_t token = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (token == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return (token >> GEN_SHIFT) == g_gen ? (token & SEQ_MASK) : 0;
}

/* Write a begun record into ring `gen`; its seq, or 0 if that ring is no longer mapped. */
static inline int64_t
rec_begin(int64_t gen, uint32_t nid, uint32_t flags, int64_t depth, int64_t ctx)
{
    if (g_hdr == NULL || gen != g_gen)
        return 0;
    int64_t start = now_ns();
    int64_t seq = __atomic_add_fetch(&g_hdr[H_COUNTER], 1, __ATOMIC_RELAXED);
    int64_t *r = g_rec + ((uint64_t)(seq - 1) & g_mask) * RECORD_WORDS;
    r[1] = (int64_t)nid | (int64_t)flags << 32;
    r[2] = tl_tid | depth << 32;
    r[3] = start;
    r[4] = 0;
    r[5] = ctx;
    __atomic_store_n(&r[0], seq, __ATOMIC_RELEASE);
    return seq;
}

/* Complete record `seq` of ring `gen`: in place while the slot is its own and less than half
 * a ring old (so a reader that re-reads open slots that often never misses the end), else as
 * an F_END record. A ring unmapped meanwhile is left alone. */
static inline void
rec_end(int64_t gen, int64_t seq, int64_t end)
{
    if (!seq || g_hdr == NULL || gen != g_gen)
        return;
    int64_t *r = g_rec + ((uint64_t)(seq - 1) & g_mask) * RECORD_WORDS;
    int64_t counter = __atomic_load_n(&g_hdr[H_COUNTER], __ATOMIC_RELAXED);
    if (__atomic_load_n(&r[0], __ATOMIC_RELAXED) == seq && (uint64_t)(counter - seq) < g_cap / 2) {
        __atomic_store_n(&r[4], end, __ATOMIC_RELEASE);
        return;
    }
    int64_t s2 = __atomic_add_fetch(&g_hdr[H_COUNTER], 1, __ATOMIC_RELAXED);
    int64_t *e = g_rec + ((uint64_t)(s2 - 1) & g_mask) * RECORD_WORDS;
    e[1] = (int64_t)F_END << 32;
    e[2] = tl_tid;
    e[3] = seq;
    e[4] = end;
    e[5] = 0;
    __atomic_store_n(&e[0], s2, __ATOMIC_RELEASE);
}

/* Complete record `seq` of ring `gen` with the CPU its thread used meanwhile: always an
 * F_END | F_CPU record, its CPU (ns) in the word a begun record keeps its ctx in. */
static inline void
rec_end_cpu(int64_t gen, int64_t seq, int64_t end, int64_t cpu)
{
    if (!seq || g_hdr == NULL || gen != g_gen)
        return;
    int64_t s2 = __atomic_add_fetch(&g_hdr[H_COUNTER], 1, __ATOMIC_RELAXED);
    int64_t *e = g_rec + ((uint64_t)(s2 - 1) & g_mask) * RECORD_WORDS;
    e[1] = (int64_t)(F_END | F_CPU) << 32;
    e[2] = tl_tid;
    e[3] = seq;
    e[4] = end;
    e[5] = cpu;
    __atomic_store_n(&e[0], s2, __ATOMIC_RELEASE);
}

/* The end of a sync span begun with thread CPU cpu0 (-1: not measured). */
static inline void
span_end(int64_t gen, int64_t seq, int64_t end, int64_t cpu0)
{
    int64_t cpu1 = cpu0 >= 0 ? thread_cpu_ns() : -1;
    if (cpu1 >= cpu0 && cpu0 >= 0)
        rec_end_cpu(gen, seq, end, cpu1 - cpu0);
    else
        rec_end(gen, seq, end);
}

/* Hand the exception being raised to the error hook (which writes its text to the extras),
 * leaving it raised. */
static void
report_error(int64_t gen, int64_t seq)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    if (seq && gen == g_gen) {
        PyObject *token = PyLong_FromLongLong(gen << GEN_SHIFT | seq);
        if (token != NULL) {
            PyObject *args[2] = {token, value ? value : Py_None};
            Py_XDECREF(call_hook(g_error, args, 2));
            Py_DECREF(token);
        }
        else
            PyErr_Clear();
    }
    PyErr_Restore(type, value, tb);
}

static void
report(PyObject *hook, int64_t gen, int64_t seq, PyObject *value)
{
    PyObject *token = PyLong_FromLongLong(gen << GEN_SHIFT | seq);
    if (token == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *args[2] = {token, value};
    Py_XDECREF(call_hook(hook, args, 2));
    Py_DECREF(token);
}

/* -- Timed: the wrapper @timed puts around a sync function ------------------------------- */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn, *label, *attrs, *dict, *weakrefs;
    int64_t gen; /* the ring nid belongs to */
    uint32_t nid;
} Timed;

static PyObject *
timed_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Timed *self = (Timed *)op;
    if (!g_active)
        return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    if (self->gen != g_gen) {
        int64_t gen = g_gen;
        self->nid = intern_name(self->label, self->attrs);
        self->gen = gen;
    }
    thread_ready();
    int64_t ctx = current_ctx();
    int64_t gen = self->gen;
    int cpu = g_cpu;
    int64_t seq = rec_begin(gen, self->nid, cpu ? F_CPU : 0, ++tl_depth, ctx);
    int64_t cpu0 = cpu ? thread_cpu_ns() : -1;
    PyObject *res = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    tl_depth--;
    int64_t end = now_ns();
    if (res == NULL) {
        end |= ERR_BIT;
        report_error(gen, seq);
    }
    if (cpu)
        span_end(gen, seq, end, cpu0);
    else
        rec_end(gen, seq, end);
    return res;
}

static PyObject *
timed_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *fn, *label, *attrs = Py_None;
    static char *kwlist[] = {"fn", "label", "attrs", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:Timed", kwlist, &fn, &label, &attrs))
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "Timed() needs a callable");
        return NULL;
    }
    Timed *self = (Timed *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = timed_vectorcall;
    self->fn = Py_NewRef(fn);
    self->label = Py_NewRef(label);
    self->attrs = attrs == Py_None ? NULL : Py_NewRef(attrs);
    return (PyObject *)self;
}

static int
timed_traverse(Timed *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->label);
    Py_VISIT(self->attrs);
    Py_VISIT(self->dict);
    return 0;
}

static int
timed_clear(Timed *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->label);
    Py_CLEAR(self->attrs);
    Py_CLEAR(self->dict);
    return 0;
}

static void
timed_dealloc(Timed *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    timed_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A method: bind like a function does. */
static PyObject *
timed_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

/* Pickled as the function it stands for would be (instruments._reduce_timed decides). */
static PyObject *
timed_reduce(PyObject *self, PyObject *unused)
{
    if (g_reduce == NULL)
        return PyObject_GetAttrString(self, "__qualname__");
    return PyObject_CallOneArg(g_reduce, self);
}

static PyObject *
timed_get_fn(Timed *self, void *closure)
{
    return Py_NewRef(self->fn);
}

static PyObject *
timed_get_label(Timed *self, void *closure)
{
    return Py_NewRef(self->label);
}

static PyObject *
timed_get_attrs(Timed *self, void *closure)
{
    return Py_NewRef(self->attrs ? self->attrs : Py_None);
}

static PyObject *
timed_repr(Timed *self)
{
    return PyUnicode_FromFormat("<timed %R>", self->fn);
}

static PyMethodDef timed_methods[] = {
    {"__reduce__", timed_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef timed_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"_fn", (getter)timed_get_fn, NULL, NULL, NULL},
    {"_label", (getter)timed_get_label, NULL, NULL, NULL},
    {"_attrs", (getter)timed_get_attrs, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TimedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "workerscope.worker._fastspan.Timed",
    .tp_doc = "Timed(fn, label, attrs=None): call fn, recorded as a span when a monitor is active.",
    .tp_basicsize = sizeof(Timed),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_new = timed_new,
    .tp_dealloc = (destructor)timed_dealloc,
    .tp_traverse = (traverseproc)timed_traverse,
    .tp_clear = (inquiry)timed_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Timed, vectorcall),
    .tp_descr_get = timed_get,
    .tp_dictoffset = offsetof(Timed, dict),
    .tp_weaklistoffset = offsetof(Timed, weakrefs),
    .tp_repr = (reprfunc)timed_repr,
    .tp_methods = timed_methods,
    .tp_getset = timed_getset,
};

/* -- span(): a sync span's context manager ----------------------------------------------- */
typedef struct {
    PyObject_HEAD
    PyObject *name, *attrs;
    int64_t gen, seq, cpu0; /* cpu0: its thread's CPU at its begin, -1 if not measured */
    int depth_taken;
} Span;

static PyObject *
span_enter(Span *self, PyObject *unused)
{
    if (g_active && g_hdr != NULL) {
        int64_t gen = g_gen;
        uint32_t nid = 0;
        PyObject *known = PyDict_GetItemWithError(g_names, self->name);
        if (known != NULL)
            nid = (uint32_t)PyLong_AsUnsignedLong(known);
        else {
            PyErr_Clear(); /* unhashable name: interned each time */
            nid = intern_name(self->name, NULL);
            PyObject *value = PyLong_FromUnsignedLong(nid);
            if (value == NULL || (gen == g_gen && PyDict_SetItem(g_names, self->name, value) < 0))
                PyErr_Clear();
            Py_XDECREF(value);
        }
        thread_ready();
        int64_t ctx = current_ctx();
        self->depth_taken = 1;
        self->gen = gen;
        self->seq = rec_begin(gen, nid, g_cpu ? F_CPU : 0, ++tl_depth, ctx);
        if (self->attrs != NULL && self->seq)
            report(g_attrs, gen, self->seq, self->attrs);
        self->cpu0 = g_cpu ? thread_cpu_ns() : -1;
    }
    return Py_NewRef(self);
}

static PyObject *
span_exit(Span *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->depth_taken) {
        tl_depth--;
        self->depth_taken = 0;
    }
    if (self->seq) {
        int64_t end = now_ns();
        if (nargs >= 1 && args[0] != Py_None) {
            end |= ERR_BIT;
            report(g_error, self->gen, self->seq, nargs >= 2 ? args[1] : args[0]);
        }
        span_end(self->gen, self->seq, end, self->cpu0);
        self->seq = 0;
    }
    Py_RETURN_FALSE;
}

static void
span_dealloc(Span *self)
{
    Py_XDECREF(self->name);
    Py_XDECREF(self->attrs);
    PyObject_Free(self);
}

static PyMethodDef span_methods[] = {
    {"__enter__", (PyCFunction)span_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))span_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "workerscope.worker._fastspan._Span",
    .tp_basicsize = sizeof(Span),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)span_dealloc,
    .tp_methods = span_methods,
};

/* What span() returns with no monitor active: nothing recorded, nothing made. */
static PyObject *
nospan_enter(PyObject *self, PyObject *unused)
{
    return Py_NewRef(self);
}

static PyObject *
nospan_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_RETURN_NONE;
}

static PyMethodDef nospan_methods[] = {
    {"__enter__", nospan_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))nospan_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject NoSpanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "workerscope.worker._fastspan._NoSpan",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = nospan_methods,
};

static PyObject *
fs_span(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "span() takes a name and keyword attributes");
        return NULL;
    }
    if (!g_active)
        return Py_NewRef(g_nospan);
    PyObject *attrs = NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nkw) {
        attrs = PyDict_New();
        if (attrs == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < nkw; i++)
            if (PyDict_SetItem(attrs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
                Py_DECREF(attrs);
                return NULL;
            }
    }
    if (g_running_loop != NULL) {
        /* Inside a running event loop a block may span awaits, and other tasks run meanwhile
         * on this thread: an async span (Python), parented through its task's context. */
        PyObject *loop = PyObject_CallNoArgs(g_running_loop);
        if (loop == NULL)
            PyErr_Clear();
        else if (loop != Py_None) {
            Py_DECREF(loop);
            PyObject *fargs[2] = {args[0], attrs ? attrs : Py_None};
            PyObject *res = PyObject_Vectorcall(g_async_span, fargs, 2, NULL);
            Py_XDECREF(attrs);
            return res;
        }
        else
            Py_DECREF(loop);
    }
    Span *self = PyObject_New(Span, &SpanType);
    if (self == NULL) {
        Py_XDECREF(attrs);
        return NULL;
    }
    self->name = Py_NewRef(args[0]);
    self->attrs = attrs;
    self->gen = self->seq = 0;
    self->cpu0 = -1;
    self->depth_taken = 0;
    return (PyObject *)self;
}

/* -- module functions -------------------------------------------------------------------- */
static PyObject *
fs_set_ring(PyObject *mod, PyObject *args)
{
    PyObject *buf;
    long long gen, rec_off, cap;
    if (!PyArg_ParseTuple(args, "OLLL:set_ring", &buf, &gen, &rec_off, &cap))
        return NULL;
    g_hdr = g_rec = NULL;
    g_gen = 0;
    g_active = 0;
    if (g_have_view) {
        PyBuffer_Release(&g_view);
        g_have_view = 0;
    }
    PyDict_Clear(g_names);
    if (buf == Py_None)
        Py_RETURN_NONE;
    if (cap < 1 || (cap & (cap - 1)) || rec_off < 0 || rec_off % 8 || gen < 1) {
        PyErr_SetString(PyExc_ValueError, "set_ring: bad layout");
        return NULL;
    }
    if (PyObject_GetBuffer(buf, &g_view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    g_have_view = 1;
    if (g_view.len < rec_off + cap * RECORD_WORDS * 8 || ((uintptr_t)g_view.buf) % 8) {
        PyBuffer_Release(&g_view);
        g_have_view = 0;
        PyErr_SetString(PyExc_ValueError, "set_ring: the buffer is smaller than the ring");
        return NULL;
    }
    g_hdr = (int64_t *)g_view.buf;
    g_rec = (int64_t *)((char *)g_view.buf + rec_off);
    g_cap = (uint64_t)cap;
    g_mask = g_cap - 1;
    g_gen = gen;
    Py_RETURN_NONE;
}

static PyObject *
fs_set_active(PyObject *mod, PyObject *flag)
{
    g_active = PyObject_IsTrue(flag) == 1 && g_hdr != NULL;
    Py_RETURN_NONE;
}

static PyObject *
fs_set_span_cpu(PyObject *mod, PyObject *flag)
{
    g_cpu = PyObject_IsTrue(flag) == 1;
    Py_RETURN_NONE;
}

static PyObject *
fs_set_hooks(PyObject *mod, PyObject *args)
{
    PyObject *h[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO:set_hooks", &h[0], &h[1], &h[2], &h[3], &h[4], &h[5],
                          &h[6]))
        return NULL;
    PyObject **slots[7] = {&g_intern, &g_thread, &g_error, &g_attrs, &g_async_span, &g_ctxvar,
                           &g_running_loop};
    for (int i = 0; i < 7; i++)
        Py_XSETREF(*slots[i], Py_NewRef(h[i]));
    Py_RETURN_NONE;
}

static PyObject *
fs_set_reduce(PyObject *mod, PyObject *fn)
{
    Py_XSETREF(g_reduce, Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *
fs_async_open(PyObject *mod, PyObject *delta)
{
    long d = PyLong_AsLong(delta);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    g_async_open += d;
    Py_RETURN_NONE;
}

/* begin(name id, flags) -> token: an async span's or a mark's record (no depth level). */
static PyObject *
fs_begin(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "begin(nid, flags)");
        return NULL;
    }
    unsigned long nid = PyLong_AsUnsignedLong(args[0]);
    unsigned long flags = PyLong_AsUnsignedLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (g_hdr == NULL)
        return PyLong_FromLong(0);
    int64_t gen = g_gen;
    thread_ready();
    int64_t seq = rec_begin(gen, (uint32_t)nid, (uint32_t)flags, tl_depth, current_ctx());
    return PyLong_FromLongLong(seq ? gen << GEN_SHIFT | seq : 0);
}

/* finish(token, error) */
static PyObject *
fs_finish(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "finish(token, error)");
        return NULL;
    }
    int64_t token = PyLong_AsLongLong(args[0]);
    if (token == -1 && PyErr_Occurred())
        return NULL;
    int err = PyObject_IsTrue(args[1]);
    int64_t end = now_ns() | (err == 1 ? ERR_BIT : 0);
    rec_end(token >> GEN_SHIFT, token & SEQ_MASK, end);
    Py_RETURN_NONE;
}

static PyObject *
fs_depth(PyObject *mod, PyObject *unused)
{
    return PyLong_FromLongLong(tl_depth);
}

/* The environment watch (worker/envwatch.py): os.environ's writes and deletes call os.putenv
 * and os.unsetenv, which raise audit events of those names (PEP 578); this hook counts them, so
 * a profiled function reads its settings again only after one. A C hook, since every audited
 * event of the process (open, import, sys._getframe) goes through it: two compares, against a
 * Python hook's call of ~160 ns. The audit runs with the GIL held. */
static unsigned long long g_env_changes;
static int g_env_watching;
static int g_env_asked;
static const char ENV_PROBE[] = "workerscope.envwatch";

static int
env_hook(const char *event, PyObject *args, void *data)
{
    if (event[0] == 'o') {
        if (strcmp(event, "os.putenv") == 0 || strcmp(event, "os.unsetenv") == 0)
            g_env_changes++;
    }
    else if (event[0] == 'w' && strcmp(event, ENV_PROBE) == 0)
        g_env_watching = 1;
    return 0;
}

static PyObject *
fs_watch_env(PyObject *mod, PyObject *unused)
{
    if (!g_env_asked) {
        g_env_asked = 1;
        /* An existing hook may refuse it silently: the probe event says whether it was added. */
        if (PySys_AddAuditHook(env_hook, NULL) < 0 || PySys_Audit(ENV_PROBE, NULL) < 0)
            return NULL;
    }
    return PyBool_FromLong(g_env_watching);
}

static PyObject *
fs_env_changes(PyObject *mod, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(g_env_changes);
}

static PyMethodDef fs_methods[] = {
    {"span", (PyCFunction)(void (*)(void))fs_span, METH_FASTCALL | METH_KEYWORDS,
     "span(name, **attrs): a context manager recording its block as a span named `name`."},
    {"set_ring", fs_set_ring, METH_VARARGS,
     "set_ring(buffer, gen, records offset, capacity) or set_ring(None, 0, 0, 0)."},
    {"set_active", fs_set_active, METH_O, "set_active(flag): record (a monitor is active) or not."},
    {"set_span_cpu", fs_set_span_cpu, METH_O,
     "set_span_cpu(flag): read the thread's CPU time at each sync span's edges, or not."},
    {"set_hooks", fs_set_hooks, METH_VARARGS,
     "set_hooks(intern, thread, error, attrs, async_span, ctxvar, get_running_loop)."},
    {"async_open", fs_async_open, METH_O, "async_open(delta): async spans open in the process."},
    {"set_reduce", fs_set_reduce, METH_O, "set_reduce(fn): fn(timed) is what Timed.__reduce__ returns."},
    {"begin", (PyCFunction)(void (*)(void))fs_begin, METH_FASTCALL,
     "begin(nid, flags) -> token of an async span's or a mark's record (0: none)."},
    {"finish", (PyCFunction)(void (*)(void))fs_finish, METH_FASTCALL, "finish(token, error)."},
    {"depth", fs_depth, METH_NOARGS, "The depth of sync spans open on this thread."},
    {"watch_env", fs_watch_env, METH_NOARGS,
     "watch_env() -> whether the environment's changes are counted (adds the hook once)."},
    {"env_changes", fs_env_changes, METH_NOARGS, "The environment's changes counted so far."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fs_module = {
    PyModuleDef_HEAD_INIT, "_fastspan", "The C fast path of workerscope's span recorder.", -1,
    fs_methods,
};

PyMODINIT_FUNC
PyInit__fastspan(void)
{
    if (PyType_Ready(&TimedType) < 0 || PyType_Ready(&SpanType) < 0
        || PyType_Ready(&NoSpanType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&fs_module);
    if (m == NULL)
        return NULL;
    g_names = PyDict_New();
    g_nospan = PyObject_New(PyObject, &NoSpanType);
    if (g_names == NULL || g_nospan == NULL || PyModule_AddIntConstant(m, "LAYOUT", LAYOUT) < 0
        || PyModule_AddObjectRef(m, "Timed", (PyObject *)&TimedType) < 0
        || PyModule_AddObjectRef(m, "NO_SPAN", g_nospan) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (pthread_atfork(NULL, NULL, after_fork_child) != 0) {
        Py_DECREF(m);
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return NULL;
    }
    return m;
}
