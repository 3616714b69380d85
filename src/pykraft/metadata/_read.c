/* Metadata record bodies read in C: the compiled twin of the readers that
 * pykraft.metadata.codec generates in Python, which are the reference (read codec.py's
 * docstring for the format and the rules). Every node decodes every PartitionRecord and
 * PartitionChangeRecord of the log, ~100,000 of them when one broker is fenced at 100,000
 * partitions; here a record costs a fraction of a microsecond where the generated Python
 * takes one to three.
 *
 * One Reader serves one record class at one flexible version. codec.py describes its
 * fields as a small program (`Reader(cls, setters, defaults, regular, tagged, ...)`):
 *
 *   setters   the class's slot descriptors, one per field in declaration order
 *   defaults  each field's value before reading (its default, for tagged and absent ones)
 *   regular   (field index, op) per field written in order
 *   tagged    (tag, field index, op) per tagged field, ascending tags
 *
 * where an op is a kind (the K_ values below, in codec.py's _NATIVE_KINDS order), plus
 * OP_ARRAY for an array of that kind and OP_NULLABLE when null is allowed at this version.
 *
 * reader(buf, pos) -> (message, pos after it), for buf a bytes object, as a generated
 * reader. Every malformed input raises the codec's MetadataDecodeError (the Python reader
 * lets struct.error, IndexError or UnicodeDecodeError escape for some, and the public
 * functions turn those into MetadataDecodeError: the same records are accepted and refused,
 * and accepted ones are equal). Every read is bounded by the end of the buffer.
 *
 * The message is built as the generated code builds it: object.__new__ of the class, then
 * each slot stored through its descriptor (codec.py only asks for a Reader for a slotted
 * dataclass whose __init__ would only store them). UUIDs and arrays of UUIDs come from the
 * codec's caches, so the image shares one object per id either way.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

enum kind { K_INT8, K_INT16, K_UINT16, K_INT32, K_INT64, K_FLOAT64, K_BOOL, K_UUID,
            K_STRING, K_BYTES, K_COUNT };
#define OP_KIND 0x0f
#define OP_ARRAY 0x10
#define OP_NULLABLE 0x20
#define TAGGED_MAX 64 /* known tags are tracked in one 64-bit mask */

static const Py_ssize_t fixed_size[K_COUNT] = {1, 2, 2, 4, 8, 8, 1, 16, 0, 0};

typedef struct {
    Py_ssize_t field;
    int op;
} field_op;

typedef struct {
    uint32_t tag;
    Py_ssize_t field;
    int op;
} tagged_op;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    PyObject *setters;  /* tuple of slot descriptors */
    PyObject *defaults; /* tuple, one per field */
    PyObject *error;    /* MetadataDecodeError */
    PyObject *uuids, *uuid_of, *uuid_arrays, *uuid_array_of;
    Py_ssize_t fields;
    Py_ssize_t regular_count;
    field_op *regular;
    Py_ssize_t tagged_count;
    tagged_op *tagged;
} Reader;

typedef struct {
    Reader *reader;
    const uint8_t *buf;
    Py_ssize_t len;
    Py_ssize_t pos;
} cursor;

static int fail(cursor *c, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    PyObject *message = PyUnicode_FromFormatV(format, args);
    va_end(args);
    if (message != NULL) {
        PyErr_SetObject(c->reader->error, message);
        Py_DECREF(message);
    }
    return -1;
}

static int short_read(cursor *c)
{
    return fail(c, "%R ends at byte %zd, inside a field", (PyObject *)c->reader->cls, c->len);
}

/* An unsigned varint of at most five bytes whose value fits 32 bits, as
 * codec.read_unsigned_varint reads it (a longer encoding of a small value is accepted). */
static int read_uvarint(cursor *c, uint32_t *out)
{
    Py_ssize_t p = c->pos;
    if (p >= c->len)
        return short_read(c);
    uint8_t byte = c->buf[p];
    if (byte < 0x80) {
        *out = byte;
        c->pos = p + 1;
        return 0;
    }
    uint64_t result = byte & 0x7f;
    int shift = 7;
    for (Py_ssize_t index = 1; index < 5; index++) {
        if (p + index >= c->len)
            return short_read(c);
        byte = c->buf[p + index];
        result |= (uint64_t)(byte & 0x7f) << shift;
        if (byte < 0x80) {
            if (result > 0xffffffffu)
                return fail(c, "unsigned varint %llu exceeds 32 bits",
                            (unsigned long long)result);
            *out = (uint32_t)result;
            c->pos = p + index + 1;
            return 0;
        }
        shift += 7;
    }
    return fail(c, "unsigned varint longer than 5 bytes");
}

/* A length or count prefix: the varint less one, -1 for null. */
static int read_length(cursor *c, int64_t *out)
{
    uint32_t raw;
    if (read_uvarint(c, &raw) < 0)
        return -1;
    *out = (int64_t)raw - 1;
    return 0;
}

static uint64_t big_endian(const uint8_t *p, int size)
{
    uint64_t value = 0;
    for (int index = 0; index < size; index++)
        value = (value << 8) | p[index];
    return value;
}

/* Look `raw` up in a cache dict, or call the codec's function that makes and caches it. */
static PyObject *cached(PyObject *cache, PyObject *make, PyObject *raw)
{
    PyObject *value = PyDict_GetItemWithError(cache, raw);
    if (value != NULL)
        return Py_NewRef(value);
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallOneArg(make, raw);
}

/* One fixed-width value at the cursor (the caller checked that it fits). */
static PyObject *fixed_value(cursor *c, int kind)
{
    const uint8_t *p = c->buf + c->pos;
    c->pos += fixed_size[kind];
    switch (kind) {
    case K_INT8:
        return PyLong_FromLong((int8_t)p[0]);
    case K_INT16:
        return PyLong_FromLong((int16_t)big_endian(p, 2));
    case K_UINT16:
        return PyLong_FromLong((long)big_endian(p, 2));
    case K_INT32:
        return PyLong_FromLong((int32_t)big_endian(p, 4));
    case K_INT64:
        return PyLong_FromLongLong((int64_t)big_endian(p, 8));
    case K_FLOAT64:
        return PyFloat_FromDouble(PyFloat_Unpack8((const char *)p, 0));
    case K_BOOL:
        return PyBool_FromLong(p[0] != 0);
    case K_UUID: {
        PyObject *raw = PyBytes_FromStringAndSize((const char *)p, 16);
        if (raw == NULL)
            return NULL;
        PyObject *value = cached(c->reader->uuids, c->reader->uuid_of, raw);
        Py_DECREF(raw);
        return value;
    }
    }
    PyErr_SetString(PyExc_SystemError, "pykraft.metadata._read: not a fixed-width kind");
    return NULL;
}

/* A string (strict UTF-8) or bytes, after its length prefix; None for null if allowed. */
static PyObject *blob_value(cursor *c, int kind, int nullable)
{
    int64_t length;
    if (read_length(c, &length) < 0)
        return NULL;
    if (length < 0) {
        if (nullable)
            Py_RETURN_NONE;
        fail(c, "null in a non-nullable %s", kind == K_STRING ? "string" : "bytes");
        return NULL;
    }
    if (length > c->len - c->pos) {
        fail(c, "%s of %lld bytes runs past the end", kind == K_STRING ? "string" : "bytes",
             (long long)length);
        return NULL;
    }
    const char *start = (const char *)c->buf + c->pos;
    c->pos += (Py_ssize_t)length;
    if (kind == K_BYTES)
        return PyBytes_FromStringAndSize(start, (Py_ssize_t)length);
    PyObject *text = PyUnicode_DecodeUTF8(start, (Py_ssize_t)length, NULL);
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        fail(c, "a string is not UTF-8");
    }
    return text;
}

static PyObject *array_value(cursor *c, int kind, int nullable)
{
    int64_t count;
    if (read_length(c, &count) < 0)
        return NULL;
    if (count < 0) {
        if (nullable)
            Py_RETURN_NONE;
        fail(c, "null in a non-nullable array");
        return NULL;
    }
    Py_ssize_t left = c->len - c->pos;
    if (count > left) { /* every element takes at least a byte */
        fail(c, "%lld elements cannot fit the record", (long long)count);
        return NULL;
    }
    if (fixed_size[kind] != 0 && count * fixed_size[kind] > left) {
        fail(c, "an array of %lld elements runs past the end", (long long)count);
        return NULL;
    }
    if (kind == K_UUID) { /* one tuple shared by every record holding the same ids */
        PyObject *raw = PyBytes_FromStringAndSize((const char *)c->buf + c->pos,
                                                  (Py_ssize_t)count * 16);
        if (raw == NULL)
            return NULL;
        c->pos += (Py_ssize_t)count * 16;
        PyObject *value = cached(c->reader->uuid_arrays, c->reader->uuid_array_of, raw);
        Py_DECREF(raw);
        return value;
    }
    PyObject *items = PyTuple_New((Py_ssize_t)count);
    if (items == NULL)
        return NULL;
    for (Py_ssize_t index = 0; index < (Py_ssize_t)count; index++) {
        PyObject *item = fixed_size[kind] != 0 ? fixed_value(c, kind) : blob_value(c, kind, 0);
        if (item == NULL) {
            Py_DECREF(items);
            return NULL;
        }
        PyTuple_SET_ITEM(items, index, item);
    }
    return items;
}

static PyObject *read_value(cursor *c, int op)
{
    int kind = op & OP_KIND;
    if (op & OP_ARRAY)
        return array_value(c, kind, (op & OP_NULLABLE) != 0);
    if (fixed_size[kind] == 0)
        return blob_value(c, kind, (op & OP_NULLABLE) != 0);
    if (fixed_size[kind] > c->len - c->pos) {
        short_read(c);
        return NULL;
    }
    return fixed_value(c, kind);
}

/* Replace field `field` of `values` by the value read with `op`. */
static int read_field(cursor *c, PyObject **values, Py_ssize_t field, int op)
{
    PyObject *value = read_value(c, op);
    if (value == NULL)
        return -1;
    Py_SETREF(values[field], value);
    return 0;
}

/* The tag buffer: each known tag into its field, unknown ones skipped; a tag may appear
 * once, and a known field must end exactly where its size says. */
static int read_tag_buffer(cursor *c, PyObject **values)
{
    Reader *reader = c->reader;
    if (c->pos >= c->len)
        return short_read(c);
    if (c->buf[c->pos] == 0) { /* no tagged field: the usual case */
        c->pos++;
        return 0;
    }
    uint32_t count;
    if (read_uvarint(c, &count) < 0)
        return -1;
    uint64_t seen_known = 0;
    PyObject *seen_unknown = NULL; /* made on the first unknown tag */
    int status = -1;
    for (uint32_t index = 0; index < count; index++) {
        uint32_t tag, size;
        if (read_uvarint(c, &tag) < 0 || read_uvarint(c, &size) < 0)
            goto done;
        if ((Py_ssize_t)size > c->len - c->pos) {
            fail(c, "tagged field %lu runs past the end", (unsigned long)tag);
            goto done;
        }
        Py_ssize_t tag_end = c->pos + (Py_ssize_t)size;
        Py_ssize_t known = 0;
        while (known < reader->tagged_count && reader->tagged[known].tag != tag)
            known++;
        if (known < reader->tagged_count) {
            if (seen_known & ((uint64_t)1 << known)) {
                fail(c, "tagged field %lu appears twice", (unsigned long)tag);
                goto done;
            }
            seen_known |= (uint64_t)1 << known;
            /* read from the whole buffer, as the Python reader does, then held to its size */
            if (read_field(c, values, reader->tagged[known].field, reader->tagged[known].op) < 0)
                goto done;
            if (c->pos != tag_end) {
                fail(c, "tagged field %lu is %lu bytes, not its size", (unsigned long)tag,
                     (unsigned long)size);
                goto done;
            }
            continue;
        }
        if (seen_unknown == NULL && (seen_unknown = PySet_New(NULL)) == NULL)
            goto done;
        PyObject *key = PyLong_FromUnsignedLong(tag);
        if (key == NULL)
            goto done;
        int found = PySet_Contains(seen_unknown, key);
        if (found == 0)
            found = PySet_Add(seen_unknown, key) < 0 ? -1 : 0;
        else if (found == 1)
            fail(c, "tagged field %lu appears twice", (unsigned long)tag);
        Py_DECREF(key);
        if (found != 0)
            goto done;
        c->pos = tag_end; /* a newer writer's field: skip it */
    }
    status = 0;
done:
    Py_XDECREF(seen_unknown);
    return status;
}

static PyObject *build(Reader *reader, PyObject **values)
{
    static PyObject *no_arguments = NULL;
    if (no_arguments == NULL && (no_arguments = PyTuple_New(0)) == NULL)
        return NULL;
    PyObject *message = PyBaseObject_Type.tp_new(reader->cls, no_arguments, NULL);
    if (message == NULL)
        return NULL;
    for (Py_ssize_t field = 0; field < reader->fields; field++) {
        PyObject *setter = PyTuple_GET_ITEM(reader->setters, field);
        if (Py_TYPE(setter)->tp_descr_set(setter, message, values[field]) < 0) {
            Py_DECREF(message);
            return NULL;
        }
    }
    return message;
}

#define FIELDS_ON_STACK 32

static PyObject *reader_call(PyObject *self, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames)
{
    Reader *reader = (Reader *)self;
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "a reader takes (buf: bytes, pos: int)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    cursor c = {reader, (const uint8_t *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]),
                pos};
    if (pos < 0 || pos > c.len) {
        PyErr_SetString(PyExc_ValueError, "pos is outside the buffer");
        return NULL;
    }
    PyObject *on_stack[FIELDS_ON_STACK];
    PyObject **values = on_stack;
    if (reader->fields > FIELDS_ON_STACK) {
        values = PyMem_Malloc(sizeof(PyObject *) * (size_t)reader->fields);
        if (values == NULL)
            return PyErr_NoMemory();
    }
    for (Py_ssize_t field = 0; field < reader->fields; field++)
        values[field] = Py_NewRef(PyTuple_GET_ITEM(reader->defaults, field));
    PyObject *result = NULL;
    for (Py_ssize_t index = 0; index < reader->regular_count; index++)
        if (read_field(&c, values, reader->regular[index].field, reader->regular[index].op) < 0)
            goto done;
    if (read_tag_buffer(&c, values) < 0)
        goto done;
    PyObject *message = build(reader, values);
    if (message != NULL) {
        PyObject *end = PyLong_FromSsize_t(c.pos);
        result = end == NULL ? NULL : PyTuple_Pack(2, message, end);
        Py_XDECREF(end);
        Py_DECREF(message);
    }
done:
    for (Py_ssize_t field = 0; field < reader->fields; field++)
        Py_DECREF(values[field]);
    if (values != on_stack)
        PyMem_Free(values);
    return result;
}

/* --- the Reader type ------------------------------------------------------------------ */

static int parse_op(PyObject *value, int *op)
{
    long raw = PyLong_AsLong(value);
    if (raw == -1 && PyErr_Occurred())
        return -1;
    if (raw < 0 || raw > (OP_KIND | OP_ARRAY | OP_NULLABLE) || (raw & OP_KIND) >= K_COUNT) {
        PyErr_Format(PyExc_ValueError, "op %ld is not a field this reader knows", raw);
        return -1;
    }
    *op = (int)raw;
    return 0;
}

static int parse_field(Reader *reader, PyObject *value, Py_ssize_t *field)
{
    *field = PyLong_AsSsize_t(value);
    if (*field == -1 && PyErr_Occurred())
        return -1;
    if (*field < 0 || *field >= reader->fields) {
        PyErr_Format(PyExc_ValueError, "field %zd is not one of %zd", *field, reader->fields);
        return -1;
    }
    return 0;
}

static int reader_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Reader *reader = (Reader *)self;
    PyObject *cls, *setters, *defaults, *regular, *tagged, *error, *uuids, *uuid_of,
        *uuid_arrays, *uuid_array_of;
    if (reader->cls != NULL) {
        PyErr_SetString(PyExc_TypeError, "a Reader is made once");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!OO!OO!O:Reader", &PyType_Type, &cls, &PyTuple_Type,
                          &setters, &PyTuple_Type, &defaults, &PyTuple_Type, &regular,
                          &PyTuple_Type, &tagged, &error, &PyDict_Type, &uuids, &uuid_of,
                          &PyDict_Type, &uuid_arrays, &uuid_array_of))
        return -1;
    Py_ssize_t fields = PyTuple_GET_SIZE(setters);
    if (PyTuple_GET_SIZE(defaults) != fields) {
        PyErr_SetString(PyExc_ValueError, "one default per setter");
        return -1;
    }
    for (Py_ssize_t index = 0; index < fields; index++)
        if (Py_TYPE(PyTuple_GET_ITEM(setters, index))->tp_descr_set == NULL) {
            PyErr_SetString(PyExc_TypeError, "a setter is not a data descriptor");
            return -1;
        }
    if (PyTuple_GET_SIZE(tagged) > TAGGED_MAX) {
        PyErr_SetString(PyExc_ValueError, "more tagged fields than a reader tracks");
        return -1;
    }
    if (((PyTypeObject *)cls)->tp_new != PyBaseObject_Type.tp_new) {
        /* reader_call makes each message with object's tp_new and fills its slots */
        PyErr_SetString(PyExc_TypeError, "cls must be a class that object.__new__ makes");
        return -1;
    }
    int is_exception = PyType_Check(error) ? PyObject_IsSubclass(error, PyExc_Exception) : 0;
    if (is_exception < 0)
        return -1;
    if (!is_exception) {
        PyErr_SetString(PyExc_TypeError, "error must be an exception class");
        return -1;
    }
    reader->cls = (PyTypeObject *)Py_NewRef(cls);
    reader->setters = Py_NewRef(setters);
    reader->defaults = Py_NewRef(defaults);
    reader->error = Py_NewRef(error);
    reader->uuids = Py_NewRef(uuids);
    reader->uuid_of = Py_NewRef(uuid_of);
    reader->uuid_arrays = Py_NewRef(uuid_arrays);
    reader->uuid_array_of = Py_NewRef(uuid_array_of);
    reader->fields = fields;
    reader->regular = PyMem_Calloc((size_t)PyTuple_GET_SIZE(regular) + 1, sizeof(field_op));
    reader->tagged = PyMem_Calloc((size_t)PyTuple_GET_SIZE(tagged) + 1, sizeof(tagged_op));
    if (reader->regular == NULL || reader->tagged == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t index = 0; index < PyTuple_GET_SIZE(regular); index++) {
        PyObject *item = PyTuple_GET_ITEM(regular, index);
        field_op *op = &reader->regular[index];
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "a regular field is (field, op)");
            return -1;
        }
        if (parse_field(reader, PyTuple_GET_ITEM(item, 0), &op->field) < 0 ||
            parse_op(PyTuple_GET_ITEM(item, 1), &op->op) < 0)
            return -1;
        reader->regular_count = index + 1;
    }
    for (Py_ssize_t index = 0; index < PyTuple_GET_SIZE(tagged); index++) {
        PyObject *item = PyTuple_GET_ITEM(tagged, index);
        tagged_op *op = &reader->tagged[index];
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "a tagged field is (tag, field, op)");
            return -1;
        }
        unsigned long tag = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(item, 0));
        if (tag == (unsigned long)-1 && PyErr_Occurred())
            return -1;
        if (tag > 0xffffffffu) {
            PyErr_SetString(PyExc_ValueError, "a tag is an unsigned 32-bit number");
            return -1;
        }
        op->tag = (uint32_t)tag;
        if (parse_field(reader, PyTuple_GET_ITEM(item, 1), &op->field) < 0 ||
            parse_op(PyTuple_GET_ITEM(item, 2), &op->op) < 0)
            return -1;
        reader->tagged_count = index + 1;
    }
    reader->vectorcall = reader_call;
    return 0;
}

static int reader_traverse(PyObject *self, visitproc visit, void *arg)
{
    Reader *reader = (Reader *)self;
    Py_VISIT(reader->cls);
    Py_VISIT(reader->setters);
    Py_VISIT(reader->defaults);
    Py_VISIT(reader->error);
    Py_VISIT(reader->uuids);
    Py_VISIT(reader->uuid_of);
    Py_VISIT(reader->uuid_arrays);
    Py_VISIT(reader->uuid_array_of);
    return 0;
}

static PyObject *reader_uninitialized(PyObject *self, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames);

static int reader_clear(PyObject *self)
{
    Reader *reader = (Reader *)self;
    reader->vectorcall = reader_uninitialized; /* nothing left to read with */
    Py_CLEAR(reader->cls);
    Py_CLEAR(reader->setters);
    Py_CLEAR(reader->defaults);
    Py_CLEAR(reader->error);
    Py_CLEAR(reader->uuids);
    Py_CLEAR(reader->uuid_of);
    Py_CLEAR(reader->uuid_arrays);
    Py_CLEAR(reader->uuid_array_of);
    return 0;
}

static void reader_dealloc(PyObject *self)
{
    Reader *reader = (Reader *)self;
    PyObject_GC_UnTrack(self);
    reader_clear(self);
    PyMem_Free(reader->regular);
    PyMem_Free(reader->tagged);
    Py_TYPE(self)->tp_free(self);
}

/* Until __init__ has run there is nothing to read with. */
static PyObject *reader_uninitialized(PyObject *self, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames)
{
    PyErr_SetString(PyExc_TypeError, "this Reader was not initialized");
    return NULL;
}

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Reader *reader = (Reader *)type->tp_alloc(type, 0);
    if (reader != NULL)
        reader->vectorcall = reader_uninitialized;
    return (PyObject *)reader;
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pykraft.metadata._read.Reader",
    .tp_doc = "Reader(cls, setters, defaults, regular, tagged, error, uuids, uuid_of, "
              "uuid_arrays, uuid_array_of): reader(buf, pos) -> (message, pos after it)",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Reader, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = reader_new,
    .tp_init = reader_init,
    .tp_traverse = reader_traverse,
    .tp_clear = reader_clear,
    .tp_dealloc = reader_dealloc,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_read", "Metadata record bodies, read in C.", -1, NULL,
};

PyMODINIT_FUNC PyInit__read(void)
{
    if (PyType_Ready(&ReaderType) < 0)
        return NULL;
    PyObject *created = PyModule_Create(&module);
    if (created == NULL)
        return NULL;
    if (PyModule_AddIntConstant(created, "KINDS", K_COUNT) < 0 ||
        PyModule_AddObjectRef(created, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(created);
        return NULL;
    }
    return created;
}
