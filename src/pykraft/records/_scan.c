/* The records section of a RecordBatch v2, checked record by record without building any
 * object: the C twin of pykraft.records.validate.scan_records_python, which is the
 * reference (read its docstring for the rules). A produce request's records are checked
 * here before anything is appended, so this loop is on the hot path: about ten nanoseconds a
 * record, where a Python loop takes a microsecond or more.
 *
 * scan(section, count, base_timestamp) -> (max_timestamp, min_timestamp, keyless_count)
 *
 * Raises ValueError(index, message) for the first malformed record (index -1 when the fault
 * is the section's, not one record's). Every read is bounded by the end of the record it
 * belongs to, and every record by the end of the section.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>

#define NO_TIMESTAMP (-1)

typedef enum { SCAN_OK = 0, SCAN_SHORT = 1, SCAN_LONG = 2 } scan_status;

/* A zigzag varint of at most five bytes whose value fits 32 bits. */
static inline scan_status read_varint(const uint8_t **cursor, const uint8_t *end,
                                      int32_t *out)
{
    const uint8_t *p = *cursor;
    if (__builtin_expect(p < end && !(*p & 0x80), 1)) { /* lengths and deltas: one byte */
        *out = (int32_t)((uint32_t)(*p >> 1) ^ (0u - (uint32_t)(*p & 1u)));
        *cursor = p + 1;
        return SCAN_OK;
    }
    uint32_t raw = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (p >= end)
            return SCAN_SHORT;
        uint8_t byte = *p++;
        if (shift == 28 && (byte & 0xf0))
            return SCAN_LONG; /* a fifth byte may carry only the top four bits */
        raw |= (uint32_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *cursor = p;
            *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1u)));
            return SCAN_OK;
        }
    }
    return SCAN_LONG;
}

/* A zigzag varlong of at most ten bytes whose value fits 64 bits. */
static inline scan_status read_varlong(const uint8_t **cursor, const uint8_t *end,
                                       int64_t *out)
{
    const uint8_t *p = *cursor;
    if (__builtin_expect(p < end && !(*p & 0x80), 1)) {
        *out = (int64_t)((uint64_t)(*p >> 1) ^ (0ull - (uint64_t)(*p & 1u)));
        *cursor = p + 1;
        return SCAN_OK;
    }
    uint64_t raw = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end)
            return SCAN_SHORT;
        uint8_t byte = *p++;
        if (shift == 63 && (byte & 0xfe))
            return SCAN_LONG; /* a tenth byte may carry only the top bit */
        raw |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *cursor = p;
            *out = (int64_t)((raw >> 1) ^ (0ull - (raw & 1ull)));
            return SCAN_OK;
        }
    }
    return SCAN_LONG;
}

static PyObject *fail(Py_ssize_t index, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    PyObject *message = PyUnicode_FromFormatV(format, args);
    va_end(args);
    if (message == NULL)
        return NULL;
    PyObject *error = Py_BuildValue("(nN)", index, message);
    if (error != NULL) {
        PyErr_SetObject(PyExc_ValueError, error);
        Py_DECREF(error);
    }
    return NULL;
}

static const char *varint_problem(scan_status status)
{
    return status == SCAN_SHORT ? "runs past the end of the record" : "is longer than its type";
}

/* Skip `length` bytes of a nullable field (-1: null) inside the record. */
static int skip_bytes(const uint8_t **cursor, const uint8_t *end, int32_t length)
{
    if (length < -1 || (length > 0 && length > end - *cursor))
        return -1;
    if (length > 0)
        *cursor += length;
    return 0;
}

static PyObject *scan(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    long long base_timestamp;
    if (!PyArg_ParseTuple(args, "y*nL", &view, &count, &base_timestamp))
        return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    const uint8_t *end = p + view.len;
    int64_t max_timestamp = INT64_MIN, min_timestamp = INT64_MAX;
    Py_ssize_t keyless = 0;
    PyObject *result = NULL;
    scan_status status;

    for (Py_ssize_t index = 0; index < count; index++) {
        int32_t length, offset_delta, key_length, value_length, header_count;
        int64_t timestamp_delta;
        if ((status = read_varint(&p, end, &length)) != SCAN_OK) {
            fail(index, "record %zd: its length varint %s", index, varint_problem(status));
            goto done;
        }
        if (length < 0 || length > end - p) {
            fail(index, "record %zd declares %d bytes, %zd are left", index, (int)length,
                 (Py_ssize_t)(end - p));
            goto done;
        }
        const uint8_t *record_end = p + length;
        if (p >= record_end) {
            fail(index, "record %zd is empty", index);
            goto done;
        }
        p++; /* attributes: unused in v2 */
        if ((status = read_varlong(&p, record_end, &timestamp_delta)) != SCAN_OK) {
            fail(index, "record %zd: its timestamp delta %s", index, varint_problem(status));
            goto done;
        }
        if ((status = read_varint(&p, record_end, &offset_delta)) != SCAN_OK) {
            fail(index, "record %zd: its offset delta %s", index, varint_problem(status));
            goto done;
        }
        if (offset_delta != index) {
            fail(index, "record %zd has offset delta %d", index, (int)offset_delta);
            goto done;
        }
        if ((status = read_varint(&p, record_end, &key_length)) != SCAN_OK) {
            fail(index, "record %zd: its key length %s", index, varint_problem(status));
            goto done;
        }
        if (skip_bytes(&p, record_end, key_length) < 0) {
            fail(index, "record %zd: key length %d does not fit the record", index,
                 (int)key_length);
            goto done;
        }
        if (key_length == -1)
            keyless++;
        if ((status = read_varint(&p, record_end, &value_length)) != SCAN_OK) {
            fail(index, "record %zd: its value length %s", index, varint_problem(status));
            goto done;
        }
        if (skip_bytes(&p, record_end, value_length) < 0) {
            fail(index, "record %zd: value length %d does not fit the record", index,
                 (int)value_length);
            goto done;
        }
        if ((status = read_varint(&p, record_end, &header_count)) != SCAN_OK) {
            fail(index, "record %zd: its header count %s", index, varint_problem(status));
            goto done;
        }
        if (header_count < 0) {
            fail(index, "record %zd has %d headers", index, (int)header_count);
            goto done;
        }
        for (int32_t header = 0; header < header_count; header++) {
            int32_t header_key_length, header_value_length;
            if ((status = read_varint(&p, record_end, &header_key_length)) != SCAN_OK) {
                fail(index, "record %zd: header %d's key length %s", index, (int)header,
                     varint_problem(status));
                goto done;
            }
            if (header_key_length < 0 || skip_bytes(&p, record_end, header_key_length) < 0) {
                fail(index, "record %zd: header %d's key length %d does not fit the record",
                     index, (int)header, (int)header_key_length);
                goto done;
            }
            if ((status = read_varint(&p, record_end, &header_value_length)) != SCAN_OK) {
                fail(index, "record %zd: header %d's value length %s", index, (int)header,
                     varint_problem(status));
                goto done;
            }
            if (skip_bytes(&p, record_end, header_value_length) < 0) {
                fail(index, "record %zd: header %d's value length %d does not fit the record",
                     index, (int)header, (int)header_value_length);
                goto done;
            }
        }
        if (p != record_end) {
            fail(index, "record %zd declares %d bytes, its fields take %zd", index, (int)length,
                 (Py_ssize_t)(length - (record_end - p)));
            goto done;
        }
        /* base + delta wraps as Java's long addition does, so readers agree */
        int64_t timestamp = (int64_t)((uint64_t)base_timestamp + (uint64_t)timestamp_delta);
        if (timestamp > max_timestamp)
            max_timestamp = timestamp;
        if (timestamp != NO_TIMESTAMP && timestamp < min_timestamp)
            min_timestamp = timestamp;
    }
    if (p != end) {
        fail(-1, "%zd bytes follow the batch's %zd records", (Py_ssize_t)(end - p), count);
        goto done;
    }
    result = Py_BuildValue("(LLn)", (long long)max_timestamp, (long long)min_timestamp,
                           keyless);
done:
    PyBuffer_Release(&view);
    return result;
}

/* -- records(): the records of a section, decoded --------------------------------------
 *
 * records(section, count, base_offset, base_timestamp, log_append_time, cls, setters)
 *     -> list of `cls`
 *
 * The C twin of pykraft.records.record._decode_records_python, the reference: the same
 * records, and the same sections refused (ValueError(message); the caller raises
 * CorruptRecord). Its varints are kio's: a fifth varint byte may carry any bits (the value
 * then lies outside int32 and every field that reads one refuses it), a tenth varlong byte
 * any but the top one (the bits past 64 are dropped). Offsets and timestamps are Python's
 * sums: past int64 they are larger ints, not wrapped. Each record is made as the
 * dataclass's own __init__ would make it, through its slots' descriptors (`setters`:
 * offset, timestamp, key, value, headers), without calling it. */

/* kio's varints: up to five bytes (max_shift 28) or ten (63); a last byte may carry any
 * bits (a varint's value then lies outside int32; a varlong's bits past 64 are dropped),
 * but not its top one. */
static inline scan_status kio_read(const uint8_t **cursor, const uint8_t *end, int64_t *out,
                                   int max_shift)
{
    const uint8_t *p = *cursor;
    if (__builtin_expect(p < end && !(*p & 0x80), 1)) {
        *out = (int64_t)(*p >> 1) ^ -(int64_t)(*p & 1);
        *cursor = p + 1;
        return SCAN_OK;
    }
    uint64_t raw = 0;
    for (int shift = 0; shift <= max_shift; shift += 7) {
        if (p >= end)
            return SCAN_SHORT;
        uint8_t byte = *p++;
        raw |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *cursor = p;
            *out = (int64_t)((raw >> 1) ^ (0ull - (raw & 1ull)));
            return SCAN_OK;
        }
    }
    return SCAN_LONG;
}

static inline scan_status kio_varint(const uint8_t **cursor, const uint8_t *end, int64_t *out)
{
    return kio_read(cursor, end, out, 28);
}

static inline scan_status kio_varlong(const uint8_t **cursor, const uint8_t *end,
                                      int64_t *out)
{
    return kio_read(cursor, end, out, 63);
}

static PyObject *corrupt(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    PyObject *message = PyUnicode_FromFormatV(format, args);
    va_end(args);
    if (message != NULL) {
        PyErr_SetObject(PyExc_ValueError, message);
        Py_DECREF(message);
    }
    return NULL;
}

/* a + b as Python adds them: an int64 when it fits, a larger int otherwise */
static PyObject *exact_sum(int64_t a, int64_t b)
{
    int64_t sum;
    if (!__builtin_add_overflow(a, b, &sum))
        return PyLong_FromLongLong(sum);
    PyObject *left = PyLong_FromLongLong(a), *right = PyLong_FromLongLong(b), *total = NULL;
    if (left != NULL && right != NULL)
        total = PyNumber_Add(left, right);
    Py_XDECREF(left);
    Py_XDECREF(right);
    return total;
}

/* A nullable byte string of `length` (-1: None) at *cursor, within `end`. */
static PyObject *take_bytes(const uint8_t **cursor, const uint8_t *end, int64_t length)
{
    if (length == -1)
        Py_RETURN_NONE;
    if (length < 0 || length > end - *cursor)
        return NULL; /* no exception set: the caller says what */
    PyObject *taken = PyBytes_FromStringAndSize((const char *)*cursor, (Py_ssize_t)length);
    *cursor += length;
    return taken;
}

#define RECORD_FIELDS 5

static PyObject *make_record(PyObject *cls, PyObject *setters, PyObject **values)
{
    static PyObject *no_arguments = NULL;
    if (no_arguments == NULL && (no_arguments = PyTuple_New(0)) == NULL)
        return NULL;
    PyObject *record = PyBaseObject_Type.tp_new((PyTypeObject *)cls, no_arguments, NULL);
    if (record == NULL)
        return NULL;
    for (int field = 0; field < RECORD_FIELDS; field++) {
        PyObject *setter = PyTuple_GET_ITEM(setters, field);
        if (Py_TYPE(setter)->tp_descr_set(setter, record, values[field]) < 0) {
            Py_DECREF(record);
            return NULL;
        }
    }
    return record;
}

static PyObject *headers_of(const uint8_t **cursor, const uint8_t *end, int64_t count,
                            Py_ssize_t index)
{
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL)
        return NULL;
    for (int64_t header = 0; header < count; header++) {
        int64_t key_length, value_length;
        if (kio_varint(cursor, end, &key_length) != SCAN_OK || key_length < 0
                || key_length > end - *cursor) {
            Py_DECREF(headers);
            return corrupt("record %zd: header %lld's key does not fit the record", index,
                           (long long)header);
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)*cursor, (Py_ssize_t)key_length,
                                             "surrogateescape");
        if (key == NULL) {
            Py_DECREF(headers);
            return NULL;
        }
        *cursor += key_length;
        PyObject *value = NULL;
        if (kio_varint(cursor, end, &value_length) != SCAN_OK
                || (value = take_bytes(cursor, end, value_length)) == NULL) {
            Py_DECREF(key);
            Py_DECREF(headers);
            if (PyErr_Occurred())
                return NULL;
            return corrupt("record %zd: header %lld's value does not fit the record", index,
                           (long long)header);
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL) {
            Py_DECREF(headers);
            return NULL;
        }
        PyTuple_SET_ITEM(headers, (Py_ssize_t)header, pair);
    }
    return headers;
}

static PyObject *records(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_timestamp;
    PyObject *append_time, *cls, *setters;
    if (!PyArg_ParseTuple(args, "y*nLLOOO!", &view, &count, &base_offset, &base_timestamp,
                          &append_time, &cls, &PyTuple_Type, &setters))
        return NULL;
    PyObject *result = NULL, *list = NULL;
    if (!PyType_Check(cls) || PyTuple_GET_SIZE(setters) != RECORD_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "records: a class and its five slot descriptors");
        goto done;
    }
    for (int field = 0; field < RECORD_FIELDS; field++) {
        if (Py_TYPE(PyTuple_GET_ITEM(setters, field))->tp_descr_set == NULL) {
            PyErr_SetString(PyExc_TypeError, "records: a setter is not a data descriptor");
            goto done;
        }
    }
    if (append_time != Py_None && !PyLong_Check(append_time)) {
        PyErr_SetString(PyExc_TypeError, "records: log_append_time is an int or None");
        goto done;
    }
    const uint8_t *p = (const uint8_t *)view.buf;
    const uint8_t *end = p + view.len;
    if ((list = PyList_New(0)) == NULL)
        goto done;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, timestamp_delta, offset_delta, key_length, value_length, header_count;
        if (kio_varint(&p, end, &length) != SCAN_OK || length < 0 || length > end - p) {
            corrupt("record %zd: its length does not fit the records", index);
            goto done;
        }
        const uint8_t *record_end = p + length;
        if (p >= record_end) {
            corrupt("record %zd is empty", index);
            goto done;
        }
        p++; /* attributes: unused in v2 */
        if (kio_varlong(&p, record_end, &timestamp_delta) != SCAN_OK
                || kio_varint(&p, record_end, &offset_delta) != SCAN_OK) {
            corrupt("record %zd: its timestamp or offset delta does not fit the record", index);
            goto done;
        }
        if (offset_delta < INT32_MIN || offset_delta > INT32_MAX) {
            corrupt("record %zd: varint %lld is outside int32", index, (long long)offset_delta);
            goto done;
        }
        PyObject *values[RECORD_FIELDS] = {NULL, NULL, NULL, NULL, NULL};
        PyObject *record = NULL;
        if (kio_varint(&p, record_end, &key_length) != SCAN_OK
                || (values[2] = take_bytes(&p, record_end, key_length)) == NULL) {
            if (!PyErr_Occurred())
                corrupt("record %zd: its key does not fit the record", index);
            goto next;
        }
        if (kio_varint(&p, record_end, &value_length) != SCAN_OK
                || (values[3] = take_bytes(&p, record_end, value_length)) == NULL) {
            if (!PyErr_Occurred())
                corrupt("record %zd: its value does not fit the record", index);
            goto next;
        }
        if (kio_varint(&p, record_end, &header_count) != SCAN_OK || header_count < 0
                || header_count > record_end - p) {
            corrupt("record %zd: its header count does not fit the record", index);
            goto next;
        }
        if ((values[4] = headers_of(&p, record_end, header_count, index)) == NULL)
            goto next;
        if (p != record_end) {
            corrupt("record %zd declares %lld bytes, its fields span otherwise", index,
                    (long long)length);
            goto next;
        }
        if ((values[0] = exact_sum(base_offset, offset_delta)) == NULL)
            goto next;
        if (append_time == Py_None)
            values[1] = exact_sum(base_timestamp, timestamp_delta);
        else
            values[1] = Py_NewRef(append_time);
        if (values[1] == NULL)
            goto next;
        record = make_record(cls, setters, values);
    next:
        for (int field = 0; field < RECORD_FIELDS; field++)
            Py_XDECREF(values[field]);
        if (record == NULL)
            goto done;
        int appended = PyList_Append(list, record);
        Py_DECREF(record);
        if (appended < 0)
            goto done;
    }
    if (p != end) {
        corrupt("%zd bytes follow the batch's %zd records", (Py_ssize_t)(end - p), count);
        goto done;
    }
    result = list;
    list = NULL;
done:
    Py_XDECREF(list);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(section, count, base_timestamp) -> (max_timestamp, min_timestamp, keyless_count)"},
    {"records", records, METH_VARARGS,
     "records(section, count, base_offset, base_timestamp, log_append_time, cls, setters)"
     " -> list of cls"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "RecordBatch v2 records, checked and decoded in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
