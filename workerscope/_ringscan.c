/* _ringscan: the C fast path of the span ring's reader (spanring.RingReader, see there).
 *
 * The reader's three passes over the records copied out of a ring, each the exact twin of a
 * loop in spanring.py, which runs instead where this module is not built (or
 * WORKERSCOPE_PURE_PYTHON=1):
 *
 *   slots()  RingReader._read_new's: which slots hold the record of their seq, which were
 *            overwritten or hold what no writer writes; it stops at a slot not written yet
 *            and leaves what to do about it (wait, or give it up) to Python.
 *   sane()   RingReader._sane's first test, on every record; the records that fail it go
 *            back to Python for its second (an F_END record, a name past the names read).
 *   spans()  RingReader.read's loop: records -> SpanRecord tuples, their parents and jobs,
 *            open spans and ends found, with the reader's own dicts and lists.
 *
 * Words are the ints of memoryview.tolist() on the ring's int64 words, so each fits int64.
 * The ring's layout is spanring.py's; LAYOUT must equal spanring.VERSION, or spanring does
 * not use this module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define LAYOUT 3
#define RECORD_WORDS 6
#define F_MARK 1
#define F_ASYNC 2
#define F_END 4
#define F_CPU 8
#define FLAGS (F_MARK | F_ASYNC | F_END | F_CPU)
#define ERR_BIT ((int64_t)1 << 62)
#define LOW32 ((int64_t)0xFFFFFFFF)
#define MAX_TID ((int64_t)1 << 22)
#define MAX_DEPTH ((int64_t)1 << 16)
#define STACK_NEW_LEVELS 4 /* what a new thread's stack costs, in levels (spanring's twin) */

/* words[i] as int64 (the caller made every item an int of int64's range). */
static inline int
word(PyObject *words, Py_ssize_t i, int64_t *out)
{
    if (i < 0 || i >= PyList_GET_SIZE(words)) {
        PyErr_SetString(PyExc_IndexError, "ring words: index out of range");
        return -1;
    }
    long long v = PyLong_AsLongLong(PyList_GET_ITEM(words, i));
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

static int
append_index(PyObject *list, Py_ssize_t i)
{
    PyObject *v = PyLong_FromSsize_t(i);
    if (v == NULL)
        return -1;
    int rc = PyList_Append(list, v);
    Py_DECREF(v);
    return rc;
}

/* slots(words, at, seq, hi, c_post, cap) -> (fresh, seq, lost, damaged, waiting)
 * From the slot of seq, at words[at], to hi's. fresh: the index in words of each slot that holds its seq's record, in seq order; seq: the
 * first seq not classified; waiting: that slot is not written yet (its writer took the seq
 * and has not stored it): Python decides whether to wait for it or give it up. */
static PyObject *
slots(PyObject *self, PyObject *args)
{
    PyObject *words;
    Py_ssize_t i;
    long long seq, hi, c_post, cap;
    if (!PyArg_ParseTuple(args, "O!nLLLL", &PyList_Type, &words, &i, &seq, &hi, &c_post, &cap))
        return NULL;
    if (cap < 1 || (cap & (cap - 1))) {
        PyErr_SetString(PyExc_ValueError, "cap must be a power of two");
        return NULL;
    }
    int64_t mask = cap - 1;
    long long lost = 0, damaged = 0;
    int waiting = 0;
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return NULL;
    for (; seq <= hi; seq++, i += RECORD_WORDS) {
        int64_t s;
        if (word(words, i, &s) < 0)
            goto fail;
        /* c_post - seq < cap, written so that no int64 overflows */
        int recent = c_post < seq + cap;
        if (s == seq && recent) {
            if (append_index(fresh, i) < 0)
                goto fail;
        } else if (s < 0 || ((s - seq) & mask) || (!s && seq > cap)) {
            damaged++;
        } else if (s > seq || !recent) {
            lost++;
        } else {
            waiting = 1;
            break;
        }
    }
    return Py_BuildValue("(NLLLO)", fresh, seq, lost, damaged, waiting ? Py_True : Py_False);
fail:
    Py_DECREF(fresh);
    return NULL;
}

/* sane(words, fresh, top, born, now) -> (keep, rest)
 * keep: the records of fresh that pass RingReader._sane's first test; rest: the others, for
 * its second. */
static PyObject *
sane(PyObject *self, PyObject *args)
{
    PyObject *words, *fresh;
    long long top, born, now;
    if (!PyArg_ParseTuple(args, "O!O!LLL", &PyList_Type, &words, &PyList_Type, &fresh, &top,
                          &born, &now))
        return NULL;
    const int64_t what_hi = (int64_t)(FLAGS + 1) << 32, end_bit = (int64_t)F_END << 32;
    const int64_t td_hi = MAX_DEPTH << 32 | LOW32;
    PyObject *keep = PyList_New(0), *rest = PyList_New(0);
    if (keep == NULL || rest == NULL)
        goto fail;
    Py_ssize_t n = PyList_GET_SIZE(fresh);
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(fresh, k));
        if (i == -1 && PyErr_Occurred())
            goto fail;
        int64_t seq, what, td, start, end, ctx;
        if (word(words, i, &seq) < 0 || word(words, i + 1, &what) < 0
            || word(words, i + 2, &td) < 0 || word(words, i + 3, &start) < 0
            || word(words, i + 4, &end) < 0 || word(words, i + 5, &ctx) < 0)
            goto fail;
        int ok = 0 <= what && what < what_hi && !(what & end_bit) && (what & LOW32) <= top
                 && 0 <= td && td <= td_hi && 0 < (td & LOW32) && (td & LOW32) <= MAX_TID
                 && 0 <= ctx && ctx < seq && born <= start && start <= now
                 && (!end || (end > 0 && start <= (end & ~ERR_BIT) && (end & ~ERR_BIT) <= now));
        if (append_index(ok ? keep : rest, i) < 0)
            goto fail;
    }
    return Py_BuildValue("(NN)", keep, rest);
fail:
    Py_XDECREF(keep);
    Py_XDECREF(rest);
    return NULL;
}

/* The reader's state spans() works on: its dicts and lists, and the constants of a read. */
typedef struct {
    PyObject *names, *extras, *opened, *stacks, *ctxs, *cache, *lookup;
    PyObject *record, *unnamed, *kind_span, *kind_mark, *pid_obj;
    PyObject *out, *done;
    int64_t id_base, half, c_pre;
    int64_t room, cut; /* levels the stacks may still grow by; records not put on a stack */
    /* The last record's thread (most records follow one of the same thread) and name:
     * its tid as an int, its stack, its job cache entry's [lo, hi) and job (have_job), and
     * the name's (name, attrs) entry. Strong references, dropped at the pass's end; the
     * dicts they come from change only through this pass meanwhile. */
    int64_t tid, lo, hi, nid;
    PyObject *tid_obj, *stack, *job, *entry;
    int have_job;
} Read;

static void
forget_thread(Read *r)
{
    Py_CLEAR(r->tid_obj);
    Py_CLEAR(r->stack);
    Py_CLEAR(r->job);
    r->have_job = 0;
}

static int
read_args(PyObject *args, PyObject **words, PyObject **fresh, Read *r)
{
    long long id_base, half, c_pre, room;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O!OOOOOOO!O!LLLL", &PyList_Type, words,
                          &PyList_Type, fresh, &PyDict_Type, &r->names, &PyDict_Type,
                          &r->extras, &PyDict_Type, &r->opened, &PyDict_Type, &r->stacks,
                          &PyDict_Type, &r->ctxs, &PyDict_Type, &r->cache, &r->lookup,
                          &r->record, &r->unnamed, &r->kind_span, &r->kind_mark, &r->pid_obj,
                          &PyList_Type, &r->out, &PyList_Type, &r->done, &id_base, &half,
                          &c_pre, &room))
        return -1;
    if (!PyType_Check(r->record) || !PyType_IsSubtype((PyTypeObject *)r->record, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record must be a tuple type");
        return -1;
    }
    r->id_base = id_base;
    r->half = half;
    r->c_pre = c_pre;
    r->room = room;
    r->cut = 0;
    r->tid = r->lo = r->hi = r->nid = 0;
    r->tid_obj = r->stack = r->job = r->entry = NULL;
    r->have_job = 0;
    return 0;
}

/* A new reference to the int v. */
static inline PyObject *
num(int64_t v)
{
    return PyLong_FromLongLong((long long)v);
}

/* The list of span ids open on thread tid: stacks[tid], or a new [None], put there at a
 * cost of STACK_NEW_LEVELS of the room where that much is left (else a list of this pass
 * alone, held only as the cached thread's). A new reference. */
static PyObject *
stack_of(Read *r, PyObject *tid_obj)
{
    PyObject *stack = PyDict_GetItemWithError(r->stacks, tid_obj);
    if (stack != NULL) {
        Py_INCREF(stack);
        return stack;
    }
    if (PyErr_Occurred())
        return NULL;
    stack = PyList_New(1);
    if (stack == NULL)
        return NULL;
    Py_INCREF(Py_None);
    PyList_SET_ITEM(stack, 0, Py_None);
    if (r->room < STACK_NEW_LEVELS)
        return stack;
    if (PyDict_SetItem(r->stacks, tid_obj, stack) < 0) {
        Py_DECREF(stack);
        return NULL;
    }
    r->room -= STACK_NEW_LEVELS;
    return stack;
}

/* The job of a record begun at `start` on thread tid: the cache's (lo, hi, job) for tid + 1
 * where start falls in [lo, hi), else Jobs.lookup's answer, cached. A new reference. */
static PyObject *
job_of(Read *r, int64_t tid, PyObject *tid_obj, int64_t start, PyObject *start_obj,
       long long *lo_out, long long *hi_out)
{
    PyObject *key = num(tid + 1);
    if (key == NULL)
        return NULL;
    PyObject *hit = PyDict_GetItemWithError(r->cache, key);
    if (hit == NULL && PyErr_Occurred())
        goto fail;
    if (hit != NULL && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 3) {
        long long lo = PyLong_AsLongLong(PyTuple_GET_ITEM(hit, 0));
        long long hi = PyLong_AsLongLong(PyTuple_GET_ITEM(hit, 1));
        if (PyErr_Occurred())
            goto fail;
        if (lo <= start && start < hi) {
            PyObject *job = PyTuple_GET_ITEM(hit, 2);
            Py_INCREF(job);
            Py_DECREF(key);
            *lo_out = lo;
            *hi_out = hi;
            return job;
        }
    }
    PyObject *got = PyObject_CallFunctionObjArgs(r->lookup, r->pid_obj, tid_obj, start_obj, NULL);
    if (got == NULL)
        goto fail;
    if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 3) {
        Py_DECREF(got);
        PyErr_SetString(PyExc_TypeError, "Jobs.lookup must return (job, lo, hi)");
        goto fail;
    }
    PyObject *job = PyTuple_GET_ITEM(got, 0);
    *lo_out = PyLong_AsLongLong(PyTuple_GET_ITEM(got, 1));
    *hi_out = PyLong_AsLongLong(PyTuple_GET_ITEM(got, 2));
    if (PyErr_Occurred()) {
        Py_DECREF(got);
        goto fail;
    }
    PyObject *entry = PyTuple_Pack(3, PyTuple_GET_ITEM(got, 1), PyTuple_GET_ITEM(got, 2), job);
    Py_INCREF(job);
    Py_DECREF(got);
    if (entry == NULL || PyDict_SetItem(r->cache, key, entry) < 0) {
        Py_XDECREF(entry);
        Py_DECREF(job);
        goto fail;
    }
    Py_DECREF(entry);
    Py_DECREF(key);
    return job;
fail:
    Py_DECREF(key);
    return NULL;
}

/* Make tid the cached thread: its int and its stack. */
static int
thread(Read *r, int64_t tid)
{
    if (r->tid_obj != NULL && r->tid == tid)
        return 0;
    forget_thread(r);
    r->tid_obj = num(tid);
    if (r->tid_obj == NULL)
        return -1;
    PyObject *stack = stack_of(r, r->tid_obj);
    if (stack == NULL) {
        forget_thread(r);
        return -1;
    }
    r->stack = stack; /* the reference stack_of made */
    r->tid = tid;
    return 0;
}

/* job_of for the cached thread, from its entry where start falls in it. A new reference. */
static PyObject *
thread_job(Read *r, int64_t start, PyObject *start_obj)
{
    if (!(r->have_job && r->lo <= start && start < r->hi)) {
        long long lo, hi;
        PyObject *job = job_of(r, r->tid, r->tid_obj, start, start_obj, &lo, &hi);
        if (job == NULL)
            return NULL;
        Py_XSETREF(r->job, job);
        r->lo = lo;
        r->hi = hi;
        r->have_job = 1;
    }
    Py_INCREF(r->job);
    return r->job;
}

/* spanring._ctx_parent: the parent of a record begun in the async context ctx (ctxs[ctx] is
 * that span's (tid, depth, id)). Borrowed; `parent` where the context does not decide. */
static PyObject *
ctx_parent(Read *r, int64_t ctx, int64_t tid, int64_t level, PyObject *parent)
{
    PyObject *key = num(ctx);
    if (key == NULL)
        return NULL;
    PyObject *c = PyDict_GetItemWithError(r->ctxs, key);
    Py_DECREF(key);
    if (c == NULL)
        return PyErr_Occurred() ? NULL : parent;
    if (!PyTuple_Check(c) || PyTuple_GET_SIZE(c) != 3) {
        PyErr_SetString(PyExc_TypeError, "an async context must be (tid, depth, id)");
        return NULL;
    }
    long long ctid = PyLong_AsLongLong(PyTuple_GET_ITEM(c, 0));
    long long cdepth = PyLong_AsLongLong(PyTuple_GET_ITEM(c, 1));
    if (PyErr_Occurred())
        return NULL;
    if ((ctid == tid && level <= cdepth) || (ctid != tid && level < 1))
        return PyTuple_GET_ITEM(c, 2);
    return parent;
}

/* stack[depth] = sid, the list cut or padded (with None) to depth first; where that would
 * grow it by more than the room left, the stack is left as it is and the record counted. */
static int
push(Read *r, PyObject *stack, int64_t depth, PyObject *sid)
{
    Py_ssize_t n = PyList_GET_SIZE(stack);
    int64_t grow = depth + 1 - (int64_t)n;
    if (grow > 0 && grow > r->room) {
        r->cut++;
        return 0;
    }
    r->room -= grow;
    if (n > depth && PyList_SetSlice(stack, (Py_ssize_t)depth, n, NULL) < 0)
        return -1;
    while (PyList_GET_SIZE(stack) < depth)
        if (PyList_Append(stack, Py_None) < 0)
            return -1;
    return PyList_Append(stack, sid);
}

/* A new OpenSpan, [kind, job, id, parent, name id, start, tid, old], as opened[seq]. */
static int
open_span(Read *r, PyObject *seq_obj, PyObject *kind, PyObject *job, PyObject *sid,
          PyObject *parent, int64_t nid, PyObject *start, PyObject *tid, int old)
{
    PyObject *nid_obj = num(nid);
    if (nid_obj == NULL)
        return -1;
    PyObject *span = PyList_New(8);
    if (span == NULL) {
        Py_DECREF(nid_obj);
        return -1;
    }
    PyObject *items[8] = {kind, job, sid, parent, nid_obj, start, tid, old ? Py_True : Py_False};
    for (int k = 0; k < 8; k++) {
        if (k != 4)
            Py_INCREF(items[k]);
        PyList_SET_ITEM(span, k, items[k]);
    }
    int rc = PyDict_SetItem(r->opened, seq_obj, span);
    Py_DECREF(span);
    return rc;
}

/* out.append(SpanRecord(span, job, sid, parent, name, start, end, tid, attrs, None, False,
 * None)): the record type is a tuple's subclass, filled as tuple.__new__ fills it. */
static int
append_record(Read *r, PyObject *job, PyObject *sid, PyObject *parent, int64_t nid,
              PyObject *start, int64_t end, PyObject *tid)
{
    PyObject *entry = r->entry;
    if (entry == NULL || nid != r->nid) {
        PyObject *key = num(nid);
        if (key == NULL)
            return -1;
        entry = PyDict_GetItemWithError(r->names, key);
        Py_DECREF(key);
        if (entry == NULL && PyErr_Occurred())
            return -1;
        if (entry == NULL)
            entry = r->unnamed;
        Py_INCREF(entry);
        Py_XSETREF(r->entry, entry);
        r->nid = nid;
    }
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "a ring name must be (name, attrs)");
        return -1;
    }
    PyObject *end_obj = num(end);
    if (end_obj == NULL)
        return -1;
    PyTypeObject *type = (PyTypeObject *)r->record;
    PyObject *rec = type->tp_alloc(type, 12);
    if (rec == NULL) {
        Py_DECREF(end_obj);
        return -1;
    }
    PyObject *items[12] = {r->kind_span, job, sid, parent, PyTuple_GET_ITEM(entry, 0), start,
                           end_obj, tid, PyTuple_GET_ITEM(entry, 1), Py_None, Py_False, Py_None};
    for (int k = 0; k < 12; k++) {
        if (k != 6)
            Py_INCREF(items[k]);
        PyTuple_SET_ITEM(rec, k, items[k]);
    }
    /* Out of the collector's sight: a record refers to ints, its name, None and its name's
     * attrs (a dict decoded from the ring, which refers to no record), so it is in no cycle;
     * tracked, the records of a burst are scanned again at each collection while they wait. */
    PyObject_GC_UnTrack(rec);
    int rc = PyList_Append(r->out, rec);
    Py_DECREF(rec);
    return rc;
}

/* done.append((seq, end, cpu)) */
static int
append_end(Read *r, int64_t seq, int64_t end, int has_cpu, int64_t cpu)
{
    PyObject *item = has_cpu ? Py_BuildValue("(LLL)", (long long)seq, (long long)end,
                                             (long long)cpu)
                             : Py_BuildValue("(LLO)", (long long)seq, (long long)end, Py_None);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(r->done, item);
    Py_DECREF(item);
    return rc;
}

/* One record, begun (not an F_END): its parent, job and place on its thread's stack; then a
 * SpanRecord where it ended with no error and no extras, else an open span (and its end,
 * where one is in). */
static int
begun(Read *r, const int64_t *w)
{
    int64_t seq = w[0], what = w[1], td = w[2], start = w[3], end = w[4], ctx = w[5];
    int64_t flags = what >> 32, tid = td & LOW32, depth = td >> 32;
    int sync = !(flags & (F_ASYNC | F_MARK));
    int64_t level = sync ? depth - 1 : depth;
    int rc = -1;
    PyObject *tid_obj = NULL, *start_obj = num(start), *sid = num(r->id_base | seq);
    PyObject *seq_obj = NULL, *job = NULL;
    if (start_obj == NULL || sid == NULL || thread(r, tid) < 0)
        goto done;
    tid_obj = r->tid_obj;
    Py_INCREF(tid_obj);
    PyObject *stack = r->stack;
    Py_INCREF(stack);
    PyObject *parent = Py_None;
    if (1 <= level && level < PyList_GET_SIZE(stack))
        parent = PyList_GET_ITEM(stack, level);
    Py_INCREF(parent);
    if (ctx) {
        PyObject *p = ctx_parent(r, ctx, tid, level, parent);
        if (p == NULL)
            goto undo;
        Py_INCREF(p);
        Py_SETREF(parent, p);
    }
    job = thread_job(r, start, start_obj);
    if (job == NULL)
        goto undo;
    if (parent == Py_None) {
        Py_INCREF(job);
        Py_SETREF(parent, job);
    }
    if (sync && depth >= 1 && push(r, stack, depth, sid) < 0)
        goto undo;
    if (!(flags & (F_ASYNC | F_MARK)) && 0 < end && end < ERR_BIT && !PyDict_GET_SIZE(r->extras)) {
        /* the most common record, ended with no error and no extras: a SpanRecord now */
        rc = append_record(r, job, sid, parent, what & LOW32, start_obj, end > start ? end : start,
                           tid_obj);
        goto undo;
    }
    seq_obj = num(seq);
    if (seq_obj == NULL)
        goto undo;
    if (flags & F_ASYNC) {
        PyObject *c = Py_BuildValue("(OLO)", tid_obj, (long long)depth, sid);
        if (c == NULL)
            goto undo;
        int set = PyDict_SetItem(r->ctxs, seq_obj, c);
        Py_DECREF(c);
        if (set < 0)
            goto undo;
    }
    int old = r->c_pre - seq >= r->half;
    if (flags & F_MARK) {
        if (open_span(r, seq_obj, r->kind_mark, job, sid, parent, what & LOW32, start_obj,
                      tid_obj, old) < 0)
            goto undo;
    } else {
        int has_extra = PyDict_GET_SIZE(r->extras) ? PyDict_Contains(r->extras, seq_obj) : 0;
        if (has_extra < 0)
            goto undo;
        if (0 < end && end < ERR_BIT && !has_extra) {
            rc = append_record(r, job, sid, parent, what & LOW32, start_obj,
                               end > start ? end : start, tid_obj);
            goto undo;
        }
        if (open_span(r, seq_obj, r->kind_span, job, sid, parent, what & LOW32, start_obj,
                      tid_obj, old) < 0)
            goto undo;
    }
    rc = end ? append_end(r, seq, end, 0, 0) : 0;
undo:
    Py_DECREF(stack);
    Py_DECREF(parent);
done:
    Py_XDECREF(tid_obj);
    Py_XDECREF(start_obj);
    Py_XDECREF(sid);
    Py_XDECREF(seq_obj);
    Py_XDECREF(job);
    return rc;
}

/* spans(words, fresh, names, extras, opened, stacks, ctxs, cache, lookup, SpanRecord, unnamed,
 *       RECORD_SPAN, RECORD_MARK, pid, out, done, id_base, half, c_pre, room) -> (room, cut)
 * RingReader.read's loop over the records of fresh (indexes in words, in seq order): spans
 * that completed are appended to out, ends of open spans to done; the room left for the
 * stacks and the records not put on theirs for want of it are returned. */
static PyObject *
spans(PyObject *self, PyObject *args)
{
    PyObject *words, *fresh;
    Read r;
    if (read_args(args, &words, &fresh, &r) < 0)
        return NULL;
    int rc = 0;
    Py_ssize_t n = PyList_GET_SIZE(fresh);
    for (Py_ssize_t k = 0; k < n && rc == 0; k++) {
        rc = -1;
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(fresh, k));
        if (i == -1 && PyErr_Occurred())
            break;
        int64_t w[RECORD_WORDS];
        int j = 0;
        while (j < RECORD_WORDS && word(words, i + j, &w[j]) == 0)
            j++;
        if (j < RECORD_WORDS)
            break;
        if ((w[1] >> 32) & F_END) {
            PyObject *key = num(w[3]);
            if (key == NULL)
                break;
            int has = PyDict_Contains(r.opened, key);
            Py_DECREF(key);
            rc = has < 0 ? -1 : has ? append_end(&r, w[3], w[4], (w[1] >> 32) & F_CPU, w[5]) : 0;
            continue;
        }
        rc = begun(&r, w);
    }
    forget_thread(&r);
    Py_CLEAR(r.entry);
    if (rc < 0)
        return NULL;
    return Py_BuildValue("(LL)", (long long)r.room, (long long)r.cut);
}

static PyMethodDef methods[] = {
    {"slots", slots, METH_VARARGS, "RingReader._read_new's pass over the slots copied out."},
    {"sane", sane, METH_VARARGS, "RingReader._sane's first test of each record."},
    {"spans", spans, METH_VARARGS, "RingReader.read's pass: records -> SpanRecords."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ringscan", "The C fast path of the span ring's reader.", -1, methods,
};

PyMODINIT_FUNC
PyInit__ringscan(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddIntConstant(m, "LAYOUT", LAYOUT) < 0
                      || PyModule_AddIntConstant(m, "STACK_NEW_LEVELS", STACK_NEW_LEVELS) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
