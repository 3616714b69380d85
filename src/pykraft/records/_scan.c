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

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(section, count, base_timestamp) -> (max_timestamp, min_timestamp, keyless_count)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "RecordBatch v2 records, checked in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
