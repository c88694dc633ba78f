/* Compiled kernels for the per-record work of masked-LM objectives and the TFRecord encoder, and for the
 * per-sentence cut of a document's text after Bling Fire (from its byte offsets), and byte-level BPE's pre-tokens looked up in
 * a word cache (common/tokenization/fast_bpe.py).
 *
 * Each function does exactly what a numpy function of the project does, on the same inputs (the random draws
 * are made by numpy in the caller and passed in, so the streams are unchanged): common/kernels.py chooses this
 * module when it was built (pip install .) and MLM_PIPELINE_NUMPY_KERNELS is not set, the numpy code otherwise.
 * The byte matrix (tests/test_byte_matrix.py) and tests/common/test_kernels.py hold the two paths byte-identical.
 *
 * Arrays arrive as buffers (numpy arrays made C-contiguous and aligned, of the dtypes each caller gives with
 * np.require); every count, size (without overflow), range and alignment is checked here again, so a wrong call
 * raises ValueError instead of touching memory it does not own.
 */
#if !defined(__GNUC__) && !defined(__clang__)
#error "common/_kernels.c needs GCC or Clang (__builtin_clzll, __builtin_popcount); the numpy code runs without it"
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------ buffers */

/* a * b for two counts, or -1 when either is negative or the product does not fit a Py_ssize_t: every size the
 * kernels compute from the caller's counts goes through this, so none wraps around to a small one. */
static Py_ssize_t product(Py_ssize_t a, Py_ssize_t b) {
    if (a < 0 || b < 0 || (b != 0 && a > PY_SSIZE_T_MAX / b)) return -1;
    return a * b;
}

/* rows * width cells into *cells; a ValueError for negative counts or a product that overflows. */
static int check_shape(Py_ssize_t rows, Py_ssize_t width, Py_ssize_t *cells) {
    *cells = product(rows, width);
    if (*cells < 0) {
        PyErr_Format(PyExc_ValueError, "a shape of (%zd, %zd) is not one the kernels take", rows, width);
        return 0;
    }
    return 1;
}

static int check_len(Py_buffer *buffer, Py_ssize_t items, Py_ssize_t item_size, const char *name) {
    Py_ssize_t needed = product(items, item_size);
    if (needed < 0) {
        PyErr_Format(PyExc_ValueError, "%s: %zd items is not a count the kernels take", name, items);
        return 0;
    }
    if (buffer->len < needed) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd needed", name, buffer->len, needed);
        return 0;
    }
    /* read through a pointer of its type: an unaligned one is undefined (a SIGBUS where the CPU requires it) */
    if ((uintptr_t)buffer->buf % (uintptr_t)item_size != 0) {
        PyErr_Format(PyExc_ValueError, "%s is not aligned to its %zd-byte items", name, item_size);
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------------ layout */

/* common.objectives.bert.lay_out_pairs without word starts: [CLS] A [SEP] B [SEP], zero-padded. */
static PyObject *pair_layout(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer tokens, a_start, a_length, b_start, b_length, original, candidates, input_mask, segment_ids, seq_len;
    Py_ssize_t rows, width;
    int cls, sep, pad;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*nniiiw*w*w*w*w*", &tokens, &a_start, &a_length, &b_start, &b_length,
                          &rows, &width, &cls, &sep, &pad, &original, &candidates, &input_mask, &segment_ids,
                          &seq_len))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t cells, count = tokens.len / 4;
    if (!check_shape(rows, width, &cells) || !check_len(&a_start, rows, 8, "a_start") || !check_len(&a_length, rows, 8, "a_length") ||
        !check_len(&b_start, rows, 8, "b_start") || !check_len(&b_length, rows, 8, "b_length") ||
        !check_len(&original, cells, 4, "original") || !check_len(&candidates, cells, 1, "candidates") ||
        !check_len(&input_mask, cells, 4, "input_mask") || !check_len(&segment_ids, cells, 4, "segment_ids") ||
        !check_len(&seq_len, rows, 4, "sequence_length"))
        goto done;
    const int32_t *token = tokens.buf;
    const int64_t *as = a_start.buf, *al = a_length.buf, *bs = b_start.buf, *bl = b_length.buf;
    for (Py_ssize_t r = 0; r < rows; r++) {
        int32_t *out = (int32_t *)original.buf + r * width, *mask = (int32_t *)input_mask.buf + r * width;
        int32_t *segment = (int32_t *)segment_ids.buf + r * width;
        uint8_t *candidate = (uint8_t *)candidates.buf + r * width;
        int64_t a_len = al[r], b_len = bl[r];
        /* each bound compared on its own (no sum of the caller's numbers can wrap): then length <= width */
        if (a_len < 0 || b_len < 0 || a_len > width || b_len > width - a_len || a_len + b_len > width - 3 ||
            as[r] < 0 || bs[r] < 0 || as[r] > count - a_len || bs[r] > count - b_len) {
            PyErr_SetString(PyExc_ValueError, "an instance outside the tokens or the sequence length");
            goto done;
        }
        int64_t b_first = a_len + 2, length = b_first + b_len + 1;
        out[0] = cls;
        candidate[0] = 0;
        memcpy(out + 1, token + as[r], (size_t)a_len * 4);
        memset(candidate + 1, 1, (size_t)a_len);
        out[a_len + 1] = sep;
        candidate[a_len + 1] = 0;
        memcpy(out + b_first, token + bs[r], (size_t)b_len * 4);
        memset(candidate + b_first, 1, (size_t)b_len);
        out[length - 1] = sep;
        candidate[length - 1] = 0;
        for (Py_ssize_t p = length; p < width; p++) out[p] = pad;
        memset(candidate + length, 0, (size_t)(width - length));
        for (Py_ssize_t p = 0; p < width; p++) {
            mask[p] = p < length;
            segment[p] = p >= b_first && p < length;
        }
        ((int32_t *)seq_len.buf)[r] = (int32_t)length;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&tokens); PyBuffer_Release(&a_start); PyBuffer_Release(&a_length); PyBuffer_Release(&b_start);
    PyBuffer_Release(&b_length); PyBuffer_Release(&original); PyBuffer_Release(&candidates);
    PyBuffer_Release(&input_mask); PyBuffer_Release(&segment_ids); PyBuffer_Release(&seq_len);
    return result;
}

/* ------------------------------------------------------------------------------------------------ masking */

/* common.objectives.masking.select_tokens: selection sampling over each row's candidates with the caller's
 * (rows, width) uniform draws; returns how many positions were selected. */
static PyObject *select_tokens(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer candidates, budget, draws, selected;
    Py_ssize_t rows, width;
    if (!PyArg_ParseTuple(args, "y*y*y*nnw*", &candidates, &budget, &draws, &rows, &width, &selected)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t cells, total = 0;
    if (!check_shape(rows, width, &cells) || !check_len(&candidates, cells, 1, "candidates") || !check_len(&budget, rows, 8, "budget") ||
        !check_len(&draws, cells, 8, "draws") || !check_len(&selected, cells, 1, "selected"))
        goto done;
    for (Py_ssize_t r = 0; r < rows; r++) {
        const uint8_t *candidate = (const uint8_t *)candidates.buf + r * width;
        const double *draw = (const double *)draws.buf + r * width;
        uint8_t *out = (uint8_t *)selected.buf + r * width;
        int64_t remaining = 0, need = ((const int64_t *)budget.buf)[r];
        for (Py_ssize_t p = 0; p < width; p++) remaining += candidate[p] != 0;
        for (Py_ssize_t p = 0; p < width; p++) {
            uint8_t take = 0;
            if (candidate[p]) {
                take = draw[p] * (double)remaining < (double)need;
                need -= take;
                remaining -= 1;
            }
            out[p] = take;
            total += take;
        }
    }
    result = PyLong_FromSsize_t(total);
done:
    PyBuffer_Release(&candidates); PyBuffer_Release(&budget); PyBuffer_Release(&draws); PyBuffer_Release(&selected);
    return result;
}

/* common.objectives.masking.apply_masks after its draws: 80% [MASK], 10% kept, 10% a random id, and the
 * positions in increasing order with their original ids.  input_ids arrives as a copy of the original ids. */
static PyObject *apply_masks(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer selected, replace, keep, words, input_ids, positions, ids, weights;
    Py_ssize_t rows, width, predictions, count;
    long long mask_id;
    if (!PyArg_ParseTuple(args, "y*y*y*y*nnnnLw*w*w*w*", &selected, &replace, &keep, &words, &rows, &width,
                          &predictions, &count, &mask_id, &input_ids, &positions, &ids, &weights))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t cells, slots, k = 0;
    if (!check_shape(rows, width, &cells) || !check_shape(rows, predictions, &slots) || !check_len(&selected, cells, 1, "selected") || !check_len(&replace, count, 8, "replace") ||
        !check_len(&keep, count, 8, "keep") || !check_len(&words, count, 8, "words") ||
        !check_len(&input_ids, cells, 4, "input_ids") || !check_len(&positions, slots, 4, "positions") ||
        !check_len(&ids, slots, 4, "ids") || !check_len(&weights, slots, 4, "weights"))
        goto done;
    /* the ids and positions are int32: a value that does not fit is refused, never narrowed to another one */
    if (mask_id < INT32_MIN || mask_id > INT32_MAX || width > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "a mask id of %lld or a width of %zd does not fit the int32 ids", mask_id, width);
        goto done;
    }
    for (Py_ssize_t r = 0; r < rows; r++) {
        const uint8_t *chosen = (const uint8_t *)selected.buf + r * width;
        int32_t *row = (int32_t *)input_ids.buf + r * width;
        Py_ssize_t rank = 0;
        for (Py_ssize_t p = 0; p < width; p++) {
            if (!chosen[p]) continue;
            if (k >= count || rank >= predictions) {
                PyErr_SetString(PyExc_ValueError, "more selected positions than draws or prediction slots");
                goto done;
            }
            int32_t label = row[p];
            int64_t value = ((const double *)replace.buf)[k] < 0.8 ? mask_id
                            : ((const double *)keep.buf)[k] < 0.5 ? label : ((const int64_t *)words.buf)[k];
            if (value < INT32_MIN || value > INT32_MAX) {
                PyErr_Format(PyExc_ValueError, "a random id of %lld does not fit the int32 ids", (long long)value);
                goto done;
            }
            row[p] = (int32_t)value;
            ((int32_t *)positions.buf)[r * predictions + rank] = (int32_t)p;
            ((int32_t *)ids.buf)[r * predictions + rank] = label;
            ((float *)weights.buf)[r * predictions + rank] = 1.0f;
            rank++;
            k++;
        }
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&selected); PyBuffer_Release(&replace); PyBuffer_Release(&keep); PyBuffer_Release(&words);
    PyBuffer_Release(&input_ids); PyBuffer_Release(&positions); PyBuffer_Release(&ids); PyBuffer_Release(&weights);
    return result;
}

/* ------------------------------------------------------------------------------------------------ CRC32C */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = n;
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
        crc_table[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++) crc_table[k][n] = (crc_table[k - 1][n] >> 8) ^ crc_table[0][crc_table[k - 1][n] & 0xFF];
}

static uint32_t crc32c_soft(const uint8_t *data, size_t size) {
    uint32_t crc = 0xFFFFFFFFu;
    while (size >= 8) {
        uint64_t word;
        memcpy(&word, data, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        word = __builtin_bswap64(word);
#endif
        word ^= crc;
        crc = crc_table[7][word & 0xFF] ^ crc_table[6][(word >> 8) & 0xFF] ^ crc_table[5][(word >> 16) & 0xFF] ^
              crc_table[4][(word >> 24) & 0xFF] ^ crc_table[3][(word >> 32) & 0xFF] ^
              crc_table[2][(word >> 40) & 0xFF] ^ crc_table[1][(word >> 48) & 0xFF] ^ crc_table[0][word >> 56];
        data += 8;
        size -= 8;
    }
    while (size--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *data++) & 0xFF];
    return crc ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc32c_hard(const uint8_t *data, size_t size) {
    uint64_t crc = 0xFFFFFFFFu;
    while (size >= 8) {
        uint64_t word;
        memcpy(&word, data, 8);
        crc = _mm_crc32_u64(crc, word);
        data += 8;
        size -= 8;
    }
    uint32_t small = (uint32_t)crc;
    while (size--) small = _mm_crc32_u8(small, *data++);
    return small ^ 0xFFFFFFFFu;
}
static int has_hard_crc(void) { return __builtin_cpu_supports("sse4.2"); }
#else
static uint32_t crc32c_hard(const uint8_t *data, size_t size) { return crc32c_soft(data, size); }
static int has_hard_crc(void) { return 0; }
#endif

static uint32_t (*crc32c_of)(const uint8_t *, size_t) = crc32c_soft;

static uint32_t masked_crc(const uint8_t *data, size_t size) {
    uint32_t crc = crc32c_of(data, size);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* ------------------------------------------------------------------------------------------------ Example */

static inline Py_ssize_t varint_size(uint64_t value) {
    return (Py_ssize_t)((64 - __builtin_clzll(value | 1) + 6) / 7);
}

static inline uint8_t *put_varint(uint8_t *out, uint64_t value) {
    if (value < 0x80) {
        *out = (uint8_t)value;
        return out + 1;
    }
    if (value < 0x4000) {
        out[0] = (uint8_t)(value & 0x7F) | 0x80;
        out[1] = (uint8_t)(value >> 7);
        return out + 2;
    }
    while (value >= 0x80) {
        *out++ = (uint8_t)(value & 0x7F) | 0x80;
        value >>= 7;
    }
    *out++ = (uint8_t)value;
    return out;
}

/* A varint below 2**28 in one 4-byte store, no branch on its size: the bytes past its end are overwritten by
 * what follows it (every varint of a record is followed by at least the record's 4-byte CRC). */
static inline uint8_t *put_varint_stored(uint8_t *out, uint32_t value) {
    Py_ssize_t size = varint_size(value);
    uint32_t word = (value & 0x7Fu) | ((value << 1) & 0x7F00u) | ((value << 2) & 0x7F0000u) |
                    ((value << 3) & 0x7F000000u) | (0x00808080u >> (8 * (4 - size)));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap32(word);
#endif
    memcpy(out, &word, 4);
    return out + size;
}

typedef struct {
    const char *key;
    Py_ssize_t key_length, width;
    char code; /* 'i': int32, 'q': int64, 'f': float32 */
    Py_buffer values;
} FeatureSpec;

static inline int64_t value_at(const FeatureSpec *f, Py_ssize_t index) {
    return f->code == 'i' ? ((const int32_t *)f->values.buf)[index] : ((const int64_t *)f->values.buf)[index];
}

/* Bytes of one feature's packed values in one row; -1 for a value a varint here cannot take. */
static Py_ssize_t packed_size(const FeatureSpec *f, Py_ssize_t row) {
    if (f->code == 'f') return 4 * f->width;
    if (f->code == 'i' && f->width < ((Py_ssize_t)1 << 28)) {  /* extra <= 4 * width fits an int32 */
        const int32_t *values = (const int32_t *)f->values.buf + row * f->width;
        int32_t low = 0, extra = 0;
        for (Py_ssize_t c = 0; c < f->width; c++) {  /* comparisons only: the compiler vectorizes this loop */
            int32_t value = values[c];
            low |= value;  /* a negative value sets the sign bit */
            extra += (value >= 0x80) + (value >= 0x4000) + (value >= 0x200000) + (value >= 0x10000000);
        }
        return low < 0 ? -1 : f->width + extra;
    }
    Py_ssize_t size = 0;
    for (Py_ssize_t c = 0; c < f->width; c++) {
        int64_t value = value_at(f, row * f->width + c);
        if (value < 0 || value >= ((int64_t)1 << 35)) return -1;
        size += varint_size((uint64_t)value);
    }
    return size;
}

/* Added to every integer feature's packed size by a build for the tests (-DKERNELS_TEST_EXTRA=1): the encoder must
 * then refuse, having written other than it sized (tests/common/test_kernels.py). */
#ifndef KERNELS_TEST_EXTRA
#define KERNELS_TEST_EXTRA 0
#endif

/* common.writers.tfrecord.encode_records: the TFRecord-framed tf.train.Example of every row.  features is a
 * sequence of (key, code, values, width); values a C-contiguous (rows, width) buffer of code's type, native ints
 * and little-endian floats (the bytes a record holds). */
static PyObject *encode_records(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *specs;
    Py_ssize_t rows;
    if (!PyArg_ParseTuple(args, "On", &specs, &rows)) return NULL;
    /* a tuple of our own: the keys' bytes stay alive (held by it) whatever the caller's list does meanwhile */
    PyObject *sequence = PySequence_Tuple(specs);
    if (sequence == NULL) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(sequence), parsed = 0;
    PyObject *result = NULL;
    Py_ssize_t *packed = NULL;
    FeatureSpec *features = PyMem_Calloc((size_t)(count ? count : 1), sizeof(FeatureSpec));
    if (features == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (count == 0) {  /* an Example has a feature; rows without one would be a loop bounded by nothing */
        PyErr_SetString(PyExc_ValueError, "records need at least one feature");
        goto done;
    }
    for (; parsed < count; parsed++) {
        FeatureSpec *f = &features[parsed];
        int code;
        PyObject *spec = PyTuple_GET_ITEM(sequence, parsed);
        if (!PyTuple_Check(spec)) {
            PyErr_SetString(PyExc_TypeError, "a feature is a (key, code, values, width) tuple");
            goto done;
        }
        if (!PyArg_ParseTuple(spec, "y#Cy*n", &f->key, &f->key_length, &code,
                              &f->values, &f->width))
            goto done;
        f->code = (char)code;
        if ((code != 'i' && code != 'q' && code != 'f') || f->key_length > 127 || f->width < 0) {
            PyBuffer_Release(&f->values);
            PyErr_SetString(PyExc_ValueError, "a feature needs a key below 128 bytes and values int32, int64 or float32");
            goto done;
        }
        Py_ssize_t cells;
        if (!check_shape(rows, f->width, &cells) || !check_len(&f->values, cells, code == 'q' ? 8 : 4, "values")) {
            PyBuffer_Release(&f->values);
            goto done;
        }
    }
    /* First pass: every row's packed sizes, then the records' total. */
    /* rows * count sizes are allocated before any loop over the rows, so the rows are bounded by memory */
    Py_ssize_t sizes;
    if (!check_shape(rows, count, &sizes)) goto done;
    packed = PyMem_Calloc((size_t)(sizes ? sizes : 1), sizeof(Py_ssize_t));  /* NULL if the product overflows */
    if (packed == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t r = 0; r < rows; r++) {
        Py_ssize_t features_length = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            Py_ssize_t p = packed_size(&features[i], r);
            if (p >= 0 && features[i].code != 'f') p += KERNELS_TEST_EXTRA;
            packed[r * count + i] = p;
            if (p < 0) {
                PyErr_SetString(PyExc_ValueError, "varints take integers in [0, 2**35)");
                goto done;
            }
            Py_ssize_t list = 1 + varint_size((uint64_t)p) + p, feature = 1 + varint_size((uint64_t)list) + list;
            Py_ssize_t entry = 2 + features[i].key_length + 1 + varint_size((uint64_t)feature) + feature;
            features_length += 1 + varint_size((uint64_t)entry) + entry;
        }
        Py_ssize_t record = 16 + 1 + varint_size((uint64_t)features_length) + features_length;
        if (total > PY_SSIZE_T_MAX - record) {
            PyErr_NoMemory();
            goto done;
        }
        total += record;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    uint8_t *const end = out + total;
    for (Py_ssize_t r = 0; r < rows; r++) {
        uint8_t *const record_start = out;
        Py_ssize_t features_length = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            Py_ssize_t p = packed[r * count + i];
            Py_ssize_t list = 1 + varint_size((uint64_t)p) + p, feature = 1 + varint_size((uint64_t)list) + list;
            Py_ssize_t entry = 2 + features[i].key_length + 1 + varint_size((uint64_t)feature) + feature;
            features_length += 1 + varint_size((uint64_t)entry) + entry;
        }
        uint64_t length = (uint64_t)(1 + varint_size((uint64_t)features_length) + features_length);
        if ((uint64_t)(end - out) < 16 + length) {  /* the sizes of the first pass hold: never past the buffer */
            PyErr_SetString(PyExc_RuntimeError, "encode_records: a record does not fit the bytes sized for it");
            goto done;
        }
        uint8_t *header = out, *data = out + 12;
        for (int b = 0; b < 8; b++) header[b] = (uint8_t)(length >> (8 * b));
        uint32_t length_crc = masked_crc(header, 8);
        for (int b = 0; b < 4; b++) header[8 + b] = (uint8_t)(length_crc >> (8 * b));
        out = data;
        *out++ = 0x0A;
        out = put_varint(out, (uint64_t)features_length);
        for (Py_ssize_t i = 0; i < count; i++) {
            const FeatureSpec *f = &features[i];
            Py_ssize_t p = packed[r * count + i];
            Py_ssize_t list = 1 + varint_size((uint64_t)p) + p, feature = 1 + varint_size((uint64_t)list) + list;
            Py_ssize_t entry = 2 + f->key_length + 1 + varint_size((uint64_t)feature) + feature;
            *out++ = 0x0A;
            out = put_varint(out, (uint64_t)entry);
            *out++ = 0x0A;
            *out++ = (uint8_t)f->key_length;
            memcpy(out, f->key, (size_t)f->key_length);
            out += f->key_length;
            *out++ = 0x12;
            out = put_varint(out, (uint64_t)feature);
            *out++ = f->code == 'f' ? 0x12 : 0x1A;
            out = put_varint(out, (uint64_t)list);
            *out++ = 0x0A;
            out = put_varint(out, (uint64_t)p);
            uint8_t *const values_start = out;
            if (f->code == 'f') {  /* little-endian float32 bytes already (common/writers/tfrecord.py: "<f4") */
                memcpy(out, (const uint8_t *)f->values.buf + r * f->width * 4, (size_t)p);
                out += p;
            } else if (p == f->width) {  /* every value below 128: one byte each */
                for (Py_ssize_t c = 0; c < f->width; c++) out[c] = (uint8_t)value_at(f, r * f->width + c);
                out += p;
            } else if (f->code == 'i') {
                const int32_t *values = (const int32_t *)f->values.buf + r * f->width;
                for (Py_ssize_t c = 0; c < f->width; c++) {
                    uint32_t value = (uint32_t)values[c];
                    out = value < (1u << 28) ? put_varint_stored(out, value) : put_varint(out, value);
                }
            } else {
                for (Py_ssize_t c = 0; c < f->width; c++) out = put_varint(out, (uint64_t)value_at(f, r * f->width + c));
            }
            if (out - values_start != p) {  /* the first pass sized these values otherwise: a record to refuse */
                PyErr_Format(PyExc_RuntimeError, "encode_records: wrote %zd bytes of values sized %zd",
                             (Py_ssize_t)(out - values_start), p);
                goto done;
            }
        }
        uint32_t data_crc = masked_crc(data, (size_t)length);
        for (int b = 0; b < 4; b++) *out++ = (uint8_t)(data_crc >> (8 * b));
        if ((uint64_t)(out - record_start) != 16 + length) {
            PyErr_Format(PyExc_RuntimeError, "encode_records: wrote %zd bytes of a record sized %zd",
                         (Py_ssize_t)(out - record_start), (Py_ssize_t)(16 + length));
            goto done;
        }
    }
    if (out != end) {  /* every byte of the result written, none left as it was allocated */
        PyErr_Format(PyExc_RuntimeError, "encode_records: wrote %zd bytes of %zd sized", (Py_ssize_t)(out - (end - total)),
                     total);
        goto done;
    }
done:
    for (Py_ssize_t i = 0; i < parsed; i++) PyBuffer_Release(&features[i].values);
    PyMem_Free(features);
    PyMem_Free(packed);
    Py_DECREF(sequence);
    if (PyErr_Occurred()) Py_CLEAR(result);
    return result;
}


/* ------------------------------------------------------------------------------------------------ the plan */

/* Python's random.Random (CPython's _randommodule.c: MT19937, random(), getrandbits()) and the two methods of
 * random.py the plan calls (randint through _randbelow, getrandbits), on a copy of a Random's getstate(): the
 * same draws in the same order as common.objectives.bert.plan_instances makes them.  common/kernels.py checks
 * this against the Python plan on a sample once per process before using it. */
typedef struct {
    uint32_t mt[624];
    int index;
} Twister;

static uint32_t genrand(Twister *t) {
    static const uint32_t mag01[2] = {0x0u, 0x9908B0DFu};
    uint32_t y, *mt = t->mt;
    if (t->index >= 624) {
        int k;
        for (k = 0; k < 624 - 397; k++) {
            y = (mt[k] & 0x80000000u) | (mt[k + 1] & 0x7FFFFFFFu);
            mt[k] = mt[k + 397] ^ (y >> 1) ^ mag01[y & 1u];
        }
        for (; k < 623; k++) {
            y = (mt[k] & 0x80000000u) | (mt[k + 1] & 0x7FFFFFFFu);
            mt[k] = mt[k + (397 - 624)] ^ (y >> 1) ^ mag01[y & 1u];
        }
        y = (mt[623] & 0x80000000u) | (mt[0] & 0x7FFFFFFFu);
        mt[623] = mt[396] ^ (y >> 1) ^ mag01[y & 1u];
        t->index = 0;
    }
    y = mt[t->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9D2C5680u;
    y ^= (y << 15) & 0xEFC60000u;
    y ^= y >> 18;
    return y;
}

static double random_double(Twister *t) {
    uint32_t a = genrand(t) >> 5, b = genrand(t) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* random.Random._randbelow_with_getrandbits(n), 1 <= n < 2**32. */
static int64_t below(Twister *t, int64_t n) {
    int k = 64 - __builtin_clzll((uint64_t)n);
    uint32_t r;
    do r = genrand(t) >> (32 - k); while (r >= (uint64_t)n);
    return r;
}

/* random.Random.getrandbits(flips).bit_count(), flips >= 1. */
static int64_t heads(Twister *t, int64_t flips) {
    int64_t count = 0;
    for (; flips > 0; flips -= 32) {
        uint32_t r = genrand(t);
        if (flips < 32) r >>= 32 - flips;
        count += __builtin_popcount(r);
    }
    return count;
}

/* bisect.bisect_left(a, x, lo, hi) */
static int64_t bisect_left(const int64_t *a, int64_t x, int64_t lo, int64_t hi) {
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* common.objectives.bert.plan_instances: one dupe pass over every document.  state: the 625 words of a
 * Random's getstate()[1]; returns the number of instances written to the five output arrays (each holding at
 * least one slot per segment), and state becomes the Random's state after the plan. */
static PyObject *plan_instances(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer state, segments, documents, a_start, a_length, b_start, b_length, random_next;
    Py_ssize_t num_segments, num_documents;
    long long max_num_tokens;
    double short_seq_prob;
    int sentence_order;
    if (!PyArg_ParseTuple(args, "w*y*y*nnLdpw*w*w*w*w*", &state, &segments, &documents, &num_segments,
                          &num_documents, &max_num_tokens, &short_seq_prob, &sentence_order, &a_start, &a_length,
                          &b_start, &b_length, &random_next))
        return NULL;
    PyObject *result = NULL;
    Twister twister;
    Py_ssize_t made = 0;
    if (!check_len(&state, 625, 8, "state") || !check_len(&segments, num_segments + 1, 8, "segment_offsets") ||
        !check_len(&documents, num_documents + 1, 8, "document_offsets") ||
        !check_len(&a_start, num_segments, 8, "a_start") || !check_len(&a_length, num_segments, 8, "a_length") ||
        !check_len(&b_start, num_segments, 8, "b_start") || !check_len(&b_length, num_segments, 8, "b_length") ||
        !check_len(&random_next, num_segments, 1, "random_next"))
        goto done;
    const int64_t *words = state.buf;
    const int64_t *offsets = segments.buf, *document_offsets = documents.buf;
    if (max_num_tokens < 2 || max_num_tokens >= ((int64_t)1 << 31) || num_documents >= ((int64_t)1 << 31) ||
        num_segments >= ((int64_t)1 << 31) || words[624] < 0 || words[624] > 624) {
        PyErr_SetString(PyExc_ValueError, "a plan this kernel does not take");
        goto done;
    }
    for (Py_ssize_t d = 0; d < num_documents; d++) {
        if (document_offsets[d] < 0 || document_offsets[d + 1] <= document_offsets[d] ||
            document_offsets[d + 1] > num_segments) {
            PyErr_SetString(PyExc_ValueError, "a document without segments, or outside the segment table");
            goto done;
        }
    }
    for (int k = 0; k < 624; k++) twister.mt[k] = (uint32_t)words[k];
    twister.index = (int)words[624];
    Twister *rng = &twister;
    int64_t *out_a_start = a_start.buf, *out_a_length = a_length.buf, *out_b_start = b_start.buf;
    int64_t *out_b_length = b_length.buf;
    uint8_t *out_random = random_next.buf;
    for (int64_t document = 0; document < num_documents; document++) {
        int64_t first_segment = document_offsets[document], end_segment = document_offsets[document + 1];
        int64_t target = max_num_tokens;
        if (random_double(rng) < short_seq_prob) target = 2 + below(rng, max_num_tokens - 1);
        int64_t chunk_start = first_segment;
        while (chunk_start < end_segment) {
            if (made >= num_segments) {
                PyErr_SetString(PyExc_ValueError, "more instances than segments");
                goto done;
            }
            int64_t i = bisect_left(offsets, offsets[chunk_start] + target, chunk_start + 1, end_segment) - 1;
            int64_t chunk_size = i - chunk_start + 1;
            int64_t a_end = chunk_size < 2 ? 1 : 1 + below(rng, chunk_size - 1);
            int64_t as = offsets[chunk_start], al = offsets[chunk_start + a_end] - as, bs, bl;
            int is_random;
            if (chunk_size == 1 || (!sentence_order && random_double(rng) < 0.5)) {
                is_random = 1;
                int64_t target_b = target - al, random_document = 0;
                for (int attempt = 0; attempt < 10; attempt++) {
                    random_document = below(rng, num_documents);
                    if (random_document != document) break;
                }
                int64_t random_first = document_offsets[random_document];
                int64_t random_end = document_offsets[random_document + 1];
                int64_t random_segment = random_first + below(rng, random_end - random_first);
                bs = offsets[random_segment];
                int64_t last = bisect_left(offsets, bs + target_b, random_segment + 1, random_end);
                bl = offsets[last] - bs;
                i -= chunk_size - a_end;
            } else {
                bs = offsets[chunk_start + a_end];
                bl = offsets[i + 1] - bs;
                is_random = sentence_order && random_double(rng) < 0.5;
                if (is_random) {
                    int64_t swap_start = as, swap_length = al;
                    as = bs; al = bl; bs = swap_start; bl = swap_length;
                }
            }
            /* common.objectives.bert.truncation_counts */
            int64_t excess = al + bl - max_num_tokens, from_a = 0, from_b = 0;
            if (excess > 0) {
                if (al > bl) from_a = excess < al - bl ? excess : al - bl;
                else if (bl > al) from_b = excess < bl - al ? excess : bl - al;
                excess -= from_a + from_b;
                from_b += (excess + 1) / 2;
                from_a += excess / 2;
            }
            if (from_a) {
                as += heads(rng, from_a);
                al -= from_a;
            }
            if (from_b) {
                bs += heads(rng, from_b);
                bl -= from_b;
            }
            out_a_start[made] = as;
            out_a_length[made] = al;
            out_b_start[made] = bs;
            out_b_length[made] = bl;
            out_random[made] = (uint8_t)is_random;
            made++;
            chunk_start = i + 1;
        }
    }
    for (int k = 0; k < 624; k++) ((int64_t *)state.buf)[k] = twister.mt[k];  /* where the Random is now */
    ((int64_t *)state.buf)[624] = twister.index;
    result = PyLong_FromSsize_t(made);
done:
    PyBuffer_Release(&state); PyBuffer_Release(&segments); PyBuffer_Release(&documents);
    PyBuffer_Release(&a_start); PyBuffer_Release(&a_length); PyBuffer_Release(&b_start); PyBuffer_Release(&b_length);
    PyBuffer_Release(&random_next);
    return result;
}

/* ------------------------------------------------------------------------------------------------ sentences */

/* segments.append([piece]), or segments[-1].append(piece) when ``joins`` and there is a segment: the piece is
 * text[from:to]. */
static int put_piece(PyObject *segments, PyObject *text, Py_ssize_t from, Py_ssize_t to, int joins) {
    PyObject *piece = PyUnicode_Substring(text, from, to);
    if (piece == NULL) return -1;
    Py_ssize_t held = PyList_GET_SIZE(segments);
    int failed;
    if (joins && held > 0) {
        failed = PyList_Append(PyList_GET_ITEM(segments, held - 1), piece);
    } else {
        PyObject *segment = PyList_New(1);
        if (segment == NULL) {
            Py_DECREF(piece);
            return -1;
        }
        PyList_SET_ITEM(segment, 0, piece);  /* steals the reference */
        Py_INCREF(piece);
        failed = PyList_Append(segments, segment);
        Py_DECREF(segment);
    }
    Py_DECREF(piece);
    return failed;
}

/* common/segmenters/sentences.py's _cut_in_python, step for step (its docstring has the rules): ``text``, the
 * ``paragraphs`` joined by newlines (checked), cut at the sentence starts into a list of segments, each a list of
 * pieces.  The starts are ``count`` items of ``start_array`` or, without it, the ints of the list ``start_list``
 * (as sorted by the caller; any order is read without going outside the text). */
static PyObject *cut_text(PyObject *text, PyObject *paragraphs, PyObject *start_list, const Py_ssize_t *start_array,
                          Py_ssize_t starts_count) {
    Py_ssize_t count = PyList_GET_SIZE(paragraphs), length = PyUnicode_GET_LENGTH(text);
    if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "cut_segments: no paragraph");
        return NULL;
    }
    Py_ssize_t bytes = product(count, (Py_ssize_t)sizeof(Py_ssize_t));
    Py_ssize_t *ends = bytes < 0 ? NULL : PyMem_Malloc((size_t)bytes);  /* each paragraph's end in the text */
    if (ends == NULL) return PyErr_NoMemory();
    Py_ssize_t total = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *paragraph = PyList_GET_ITEM(paragraphs, i);
        if (!PyUnicode_Check(paragraph)) {
            PyMem_Free(ends);
            PyErr_SetString(PyExc_TypeError, "cut_segments: a paragraph is not a str");
            return NULL;
        }
        total += PyUnicode_GET_LENGTH(paragraph) + 1;
        if (total > length) break;
        ends[i] = total;
    }
    if (total != length) {
        PyMem_Free(ends);
        PyErr_SetString(PyExc_ValueError, "cut_segments: the text is not its paragraphs joined by newlines");
        return NULL;
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    PyObject *segments = PyList_New(0);
    if (segments == NULL) {
        PyMem_Free(ends);
        return NULL;
    }
    Py_ssize_t index = 0, begin = 0, end = ends[0];
    int first = 1, opens = 1;  /* the first paragraph always opens a sentence */
    for (Py_ssize_t k = 0; index < count; k++) {
        /* After the last start, one past every paragraph: the paragraphs left end with their last piece. */
        Py_ssize_t start;
        if (start_array != NULL) {
            start = k < starts_count ? start_array[k] : PY_SSIZE_T_MAX;
        } else {
            start = k < PyList_GET_SIZE(start_list) ? PyLong_AsSsize_t(PyList_GET_ITEM(start_list, k)) : PY_SSIZE_T_MAX;
            if (start == -1 && PyErr_Occurred()) goto fail;
        }
        while (start >= end && index < count) {  /* the paragraph ends before this start: its last piece */
            if (put_piece(segments, text, begin, end, first && !opens) < 0) goto fail;
            index++;
            if (index < count) {
                begin = end + 1;
                end = ends[index];
                first = 1;
                opens = start <= begin;
            }
        }
        if (start <= begin || index == count) continue;
        Py_ssize_t stop = start;  /* begin < start < end <= length: the piece's characters are in the text */
        while (stop > begin && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, stop - 1))) stop--;  /* str.rstrip */
        if (stop == begin) continue;  /* only whitespace since the last cut: no cut here */
        int joins = 0;
        if (first) {
            first = 0;
            joins = !opens;
        }
        if (put_piece(segments, text, begin, stop, joins) < 0) goto fail;
        begin = stop;
    }
    PyMem_Free(ends);
    return segments;
fail:
    PyMem_Free(ends);
    Py_DECREF(segments);
    return NULL;
}

/* cut_text over a list of int starts. */
static PyObject *cut_segments(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *text, *paragraphs, *starts;
    if (!PyArg_ParseTuple(args, "UO!O!", &text, &PyList_Type, &paragraphs, &PyList_Type, &starts)) return NULL;
    return cut_text(text, paragraphs, starts, NULL, 0);
}

/* 1 when ``data`` holds one of the byte strings of the tuple ``needles`` (one memchr pass per distinct first
 * byte, then a compare at each hit), 0 when not, -1 with a TypeError for a needle that is not non-empty bytes. */
static int holds_any(const uint8_t *data, Py_ssize_t size, PyObject *needles) {
    Py_ssize_t count = PyTuple_GET_SIZE(needles);
    uint8_t leads[256] = {0};
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *needle = PyTuple_GET_ITEM(needles, i);
        if (!PyBytes_Check(needle) || PyBytes_GET_SIZE(needle) == 0) {
            PyErr_SetString(PyExc_TypeError, "cut_at_bytes: a terminator is not non-empty bytes");
            return -1;
        }
        leads[(uint8_t)PyBytes_AS_STRING(needle)[0]] = 1;
    }
    const uint8_t *end = data + size;
    for (int lead = 0; lead < 256; lead++) {
        if (!leads[lead]) continue;
        for (const uint8_t *at = size > 0 ? memchr(data, lead, (size_t)size) : NULL; at != NULL;
             at = at + 1 < end ? memchr(at + 1, lead, (size_t)(end - at - 1)) : NULL) {
            for (Py_ssize_t i = 0; i < count; i++) {
                PyObject *needle = PyTuple_GET_ITEM(needles, i);
                Py_ssize_t length = PyBytes_GET_SIZE(needle);
                if (length <= end - at && memcmp(at, PyBytes_AS_STRING(needle), (size_t)length) == 0) return 1;
            }
        }
    }
    return 0;
}

/* How many UTF-8 continuation bytes (10xxxxxx) ``data[0:size]`` holds: eight bytes at a time, a byte counted
 * when its top bit is set and the next bit is not. */
static Py_ssize_t continuation_bytes(const uint8_t *data, Py_ssize_t size) {
    const uint64_t tops = 0x8080808080808080ULL;
    Py_ssize_t found = 0, i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t word;
        memcpy(&word, data + i, 8);
        found += __builtin_popcountll(word & ~(word << 1) & tops);
    }
    for (; i < size; i++) found += (data[i] & 0xC0) == 0x80;
    return found;
}

/* common/segmenters/sentences.py's sentence cut of a document, from Bling Fire's sentence starts as it gives them:
 * UTF-8 byte offsets (``starts``, int32) into ``utf8``, ``text`` encoded.  Each becomes a str offset (the offset
 * less the continuation bytes before it, as sentence_offsets.py's _characters has it) and ``text`` is cut there
 * as cut_segments cuts it.  None (the Python path answers, exactly as before) when ``utf8`` holds one of the
 * ``terminators`` (the CJK ones' UTF-8 forms, whose text common/segmenters/cjk_sentences.py adjusts), or when a
 * start lies outside ``utf8``, on a continuation byte, or before the start before it. */
static PyObject *cut_at_bytes(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *text, *paragraphs, *terminators;
    Py_buffer utf8, starts;
    if (!PyArg_ParseTuple(args, "UO!y*y*O!", &text, &PyList_Type, &paragraphs, &utf8, &starts, &PyTuple_Type,
                          &terminators)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t *characters = NULL;
    Py_ssize_t count = starts.len / (Py_ssize_t)sizeof(int32_t);
    if (starts.len % (Py_ssize_t)sizeof(int32_t) != 0 || !check_len(&starts, count, sizeof(int32_t), "starts")) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "cut_at_bytes: starts is not whole int32s");
        goto done;
    }
    const uint8_t *data = utf8.buf;
    int held = holds_any(data, utf8.len, terminators);
    if (held < 0) goto done;
    if (held) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    characters = PyMem_Malloc((size_t)(count > 0 ? count : 1) * sizeof(Py_ssize_t));
    if (characters == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int32_t *offsets = starts.buf;
    int ascii = utf8.len == PyUnicode_GET_LENGTH(text);  /* bytes are characters */
    Py_ssize_t counted = 0, continuations = 0, previous = 0;  /* continuations in data[0:counted] */
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t offset = offsets[k];
        if (offset < previous || offset >= utf8.len || (data[offset] & 0xC0) == 0x80) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (!ascii) {
            continuations += continuation_bytes(data + counted, offset - counted);
            counted = offset;
        }
        characters[k] = offset - continuations;
        previous = offset;
    }
    result = cut_text(text, paragraphs, NULL, characters, count);
done:
    PyMem_Free(characters);
    PyBuffer_Release(&utf8);
    PyBuffer_Release(&starts);
    return result;
}

/* ------------------------------------------------------------------------------------------------ n-grams */

typedef struct {
    double key;
    Py_ssize_t word;
} KeyedWord;

/* (key, word): the order of numpy's stable argsort of the keys (ties by position). */
static int keyed_word_order(const void *a, const void *b) {
    const KeyedWord *x = a, *y = b;
    if (x->key < y->key) return -1;
    if (x->key > y->key) return 1;
    return (x->word > y->word) - (x->word < y->word);
}

/* common.objectives.albert.select_ngrams after its draws: each row's words (word_of over its candidates, 0 ..
 * word_count - 1) visited in the order of their keys (a stable sort), each proposing an n-gram of n words (n is 1
 * + the thresholds its draw passes), shortened while it would pass the row's budget, skipped if still too long or
 * if it overlaps a covered word (common.objectives.albert.walk_row); selected is every candidate of a covered
 * word.  Returns how many positions were selected. */
static PyObject *select_ngrams(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer candidates, word_of, word_count, keys, draws, thresholds, budget, selected;
    Py_ssize_t rows, width, ngram;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*nnnw*", &candidates, &word_of, &word_count, &keys, &draws,
                          &thresholds, &budget, &rows, &width, &ngram, &selected))
        return NULL;
    PyObject *result = NULL;
    KeyedWord *order = NULL;
    int64_t *cumulative = NULL;
    uint8_t *covered = NULL;
    Py_ssize_t cells, total = 0;
    if (!check_shape(rows, width, &cells) || !check_len(&candidates, cells, 1, "candidates") ||
        !check_len(&word_of, cells, 8, "word_of") || !check_len(&word_count, rows, 8, "word_count") ||
        !check_len(&keys, cells, 8, "keys") || !check_len(&draws, cells, 8, "draws") ||
        !check_len(&budget, rows, 8, "budget") || !check_len(&selected, cells, 1, "selected"))
        goto done;
    if (ngram < 1) {
        PyErr_Format(PyExc_ValueError, "ngram is %zd, at least 1 is needed", ngram);
        goto done;
    }
    if (!check_len(&thresholds, ngram - 1, 8, "thresholds")) goto done;
    Py_ssize_t slots = width > 0 ? width : 1;
    order = PyMem_Malloc(sizeof(KeyedWord) * (size_t)slots);
    cumulative = PyMem_Malloc(sizeof(int64_t) * ((size_t)slots + 1));
    covered = PyMem_Malloc((size_t)slots);
    if (order == NULL || cumulative == NULL || covered == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const double *threshold = thresholds.buf;
    for (Py_ssize_t r = 0; r < rows; r++) {
        const uint8_t *candidate = (const uint8_t *)candidates.buf + r * width;
        const int64_t *word = (const int64_t *)word_of.buf + r * width;
        const double *key = (const double *)keys.buf + r * width, *draw = (const double *)draws.buf + r * width;
        uint8_t *out = (uint8_t *)selected.buf + r * width;
        int64_t words = ((const int64_t *)word_count.buf)[r], limit = ((const int64_t *)budget.buf)[r];
        if (words < 0 || words > width) {
            PyErr_Format(PyExc_ValueError, "row %zd has %lld words, not 0 to %zd", r, (long long)words, width);
            goto done;
        }
        /* pieces per word, as a running sum: word w covers cumulative[w + 1] - cumulative[w] positions */
        memset(cumulative, 0, sizeof(int64_t) * ((size_t)words + 1));
        for (Py_ssize_t p = 0; p < width; p++) {
            if (!candidate[p]) continue;
            if (word[p] < 0 || word[p] >= words) {
                PyErr_Format(PyExc_ValueError, "row %zd: a candidate of word %lld, not 0 to %lld", r,
                             (long long)word[p], (long long)words - 1);
                goto done;
            }
            cumulative[word[p] + 1] += 1;
        }
        for (int64_t w = 0; w < words; w++) cumulative[w + 1] += cumulative[w];
        for (int64_t w = 0; w < words; w++) {
            if (key[w] != key[w]) {  /* a NaN has no place in the order */
                PyErr_Format(PyExc_ValueError, "row %zd: key %lld is NaN", r, (long long)w);
                goto done;
            }
            order[w].key = key[w];
            order[w].word = (Py_ssize_t)w;
        }
        qsort(order, (size_t)words, sizeof(KeyedWord), keyed_word_order);
        memset(covered, 0, (size_t)words);
        int64_t count = 0;
        for (int64_t step = 0; step < words && count < limit; step++) {
            int64_t first = order[step].word, n = 1;
            for (Py_ssize_t t = 0; t < ngram - 1; t++) n += draw[step] >= threshold[t];
            int64_t last = n >= words - first ? words : first + n;
            int64_t size = cumulative[last] - cumulative[first];
            while (count + size > limit && last - first > 1) {
                last -= 1;
                size = cumulative[last] - cumulative[first];
            }
            if (count + size > limit) continue;
            int overlaps = 0;
            for (int64_t w = first; w < last; w++) overlaps |= covered[w];
            if (overlaps) continue;
            memset(covered + first, 1, (size_t)(last - first));
            count += size;
        }
        for (Py_ssize_t p = 0; p < width; p++) {
            uint8_t take = candidate[p] && covered[word[p]];
            out[p] = take;
            total += take;
        }
    }
    result = PyLong_FromSsize_t(total);
done:
    PyMem_Free(order); PyMem_Free(cumulative); PyMem_Free(covered);
    PyBuffer_Release(&candidates); PyBuffer_Release(&word_of); PyBuffer_Release(&word_count);
    PyBuffer_Release(&keys); PyBuffer_Release(&draws); PyBuffer_Release(&thresholds); PyBuffer_Release(&budget);
    PyBuffer_Release(&selected);
    return result;
}

/* ------------------------------------------------------------------------------------------------ byte-level words */

/* Character classes of GPT-2's pre-tokenizing pattern, one byte per code point (common/tokenization/fast_bpe.py
 * builds the table): \p{L}, \p{N}, \s, anything else, and characters the table cannot vouch for. */
enum { CHAR_OTHER = 0, CHAR_LETTER = 1, CHAR_NUMBER = 2, CHAR_SPACE = 3, CHAR_UNSURE = 4 };
#define CHAR_CLASSES 0x110000

/* Where the pre-token starting at i ends, by HF tokenizers' ByteLevel pattern
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (its alternatives tried in order). */
static Py_ssize_t pre_token_end(int kind, const void *data, Py_ssize_t n, Py_ssize_t i, const uint8_t *classes) {
    Py_UCS4 c = PyUnicode_READ(kind, data, i);
    if (c == '\'' && i + 1 < n) {
        Py_UCS4 d = PyUnicode_READ(kind, data, i + 1);
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
        if (i + 2 < n) {
            Py_UCS4 e = PyUnicode_READ(kind, data, i + 2);
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
        }
    }
    int run = classes[c];
    Py_ssize_t j = i + 1;
    if (c == ' ' && j < n) {  /* " ?": a space joins the run of letters, digits or other characters after it */
        int next = classes[PyUnicode_READ(kind, data, j)];
        if (next != CHAR_SPACE) run = next;
    }
    if (run != CHAR_SPACE) {
        while (j < n && classes[PyUnicode_READ(kind, data, j)] == run) j++;
        return j;
    }
    while (j < n && classes[PyUnicode_READ(kind, data, j)] == CHAR_SPACE) j++;
    /* \s+(?!\S): a run of two or more before a non-space leaves its last character to the word after it */
    return (j == n || j - i == 1) ? j : j - 1;
}

/* A growable array of int32 (ids) or of code points. */
typedef struct {
    int32_t *items;
    Py_ssize_t used, size;
} Int32s;

static int int32s_reserve(Int32s *array, Py_ssize_t more) {
    if (more <= array->size - array->used) return 0;
    Py_ssize_t size = array->size ? array->size : 4096;
    while (size - array->used < more) {
        if (size > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)sizeof(int32_t)) {
            PyErr_NoMemory();
            return -1;
        }
        size *= 2;
    }
    int32_t *grown = PyMem_Realloc(array->items, (size_t)size * sizeof(int32_t));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    array->items = grown;
    array->size = size;
    return 0;
}

static int int32s_add(Int32s *array, const int32_t *items, Py_ssize_t count) {
    if (int32s_reserve(array, count) < 0) return -1;
    memcpy(array->items + array->used, items, (size_t)count * sizeof(int32_t));
    array->used += count;
    return 0;
}

/* The word cache: a pre-token's code points -> its ids, in an open-addressed table over two arenas.  Keys are code
 * points, not a str's storage, so a word is one entry whatever the width of the text it came from; nothing is
 * allocated per looked-up word (a str per word and a dict lookup cost ~3x the whole cut). */
typedef struct {
    uint64_t hash;
    Py_ssize_t key, ids;  /* offsets into the arenas */
    int32_t key_length, id_count;
} WordSlot;

typedef struct {
    WordSlot *slots;  /* hash 0 marks an empty slot (a word's hash is never 0) */
    Py_ssize_t capacity, count;
    Int32s keys, ids;
    int busy;  /* set while byte_level_encode runs: the miss callback must not re-enter with this cache */
    /* (pre-tokens looked up, slots probed, words not kept because their probe run was full), kept by a clear */
    int64_t lookups, probes, unkept;
} WordCache;

/* A lookup probes at most this many slots from the word's home.  The hash is not keyed, so a corpus built to collide
 * (words sharing their hash's low bits, found by brute force in minutes) would otherwise grow one run of slots that
 * every new word walks: quadratic, a long job stalled by its own input.  A word whose run is full is asked of the
 * tokenizer each time and not kept, so such a corpus costs what a cold cache costs (a probe is ~1 ns, a miss
 * ~5 us), and no more.  At the table's load (at most a half) runs are short, but a full table of random words
 * has some long ones: at a bound of 32, 1 word in ~65,000 was not kept; at 128 none in 2 M. */
#define WORD_PROBES 128

#define WORD_CACHE "common._kernels.WordCache"

static void word_cache_free(PyObject *capsule) {
    WordCache *cache = PyCapsule_GetPointer(capsule, WORD_CACHE);
    if (cache == NULL) return;
    PyMem_Free(cache->slots);
    PyMem_Free(cache->keys.items);
    PyMem_Free(cache->ids.items);
    PyMem_Free(cache);
}

static WordCache *word_cache_of(PyObject *capsule) {
    if (!PyCapsule_IsValid(capsule, WORD_CACHE)) {
        PyErr_SetString(PyExc_TypeError, "not a word cache (common._kernels.word_cache())");
        return NULL;
    }
    return PyCapsule_GetPointer(capsule, WORD_CACHE);
}

static PyObject *word_cache(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(args)) {
    WordCache *cache = PyMem_Calloc(1, sizeof(WordCache));
    if (cache == NULL) return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(cache, WORD_CACHE, word_cache_free);
    if (capsule == NULL) PyMem_Free(cache);
    return capsule;
}

/* (words held, bytes held): for the caller's bound. */
static PyObject *word_cache_size(PyObject *Py_UNUSED(self), PyObject *capsule) {
    WordCache *cache = word_cache_of(capsule);
    if (cache == NULL) return NULL;
    Py_ssize_t bytes = (cache->capacity * (Py_ssize_t)sizeof(WordSlot)) +
                       (cache->keys.size + cache->ids.size) * (Py_ssize_t)sizeof(int32_t);
    return Py_BuildValue("(nn)", cache->count, bytes);
}

static PyObject *word_cache_clear(PyObject *Py_UNUSED(self), PyObject *capsule) {
    WordCache *cache = word_cache_of(capsule);
    if (cache == NULL) return NULL;
    if (cache->busy) {
        PyErr_SetString(PyExc_RuntimeError, "word cache: cleared while in use");
        return NULL;
    }
    PyMem_Free(cache->slots);
    PyMem_Free(cache->keys.items);
    PyMem_Free(cache->ids.items);
    int64_t lookups = cache->lookups, probes = cache->probes, unkept = cache->unkept;  /* work done: kept */
    memset(cache, 0, sizeof(WordCache));
    cache->lookups = lookups;
    cache->probes = probes;
    cache->unkept = unkept;
    Py_RETURN_NONE;
}

/* (pre-tokens looked up, slots probed, words not kept because their probe run was full), since the cache was made
 * (a clear keeps them). */
static PyObject *word_cache_probes(PyObject *Py_UNUSED(self), PyObject *capsule) {
    WordCache *cache = word_cache_of(capsule);
    if (cache == NULL) return NULL;
    return Py_BuildValue("(LLL)", (long long)cache->lookups, (long long)cache->probes, (long long)cache->unkept);
}

static uint64_t word_hash(int kind, const void *data, Py_ssize_t start, Py_ssize_t end) {
    uint64_t hash = 0xcbf29ce484222325ULL;  /* FNV-1a over the code points */
    for (Py_ssize_t i = start; i < end; i++) {
        hash ^= PyUnicode_READ(kind, data, i);
        hash *= 0x100000001b3ULL;
    }
    return hash ? hash : 1;
}

/* The word's slot, or the empty slot where it would go, or NULL: no table yet, or WORD_PROBES slots probed and
 * none of them the word's or empty. */
static WordSlot *word_find(WordCache *cache, uint64_t hash, int kind, const void *data, Py_ssize_t start,
                           Py_ssize_t end) {
    if (cache->capacity == 0) return NULL;
    Py_ssize_t mask = cache->capacity - 1, length = end - start;
    Py_ssize_t at = (Py_ssize_t)(hash & (uint64_t)mask);
    for (int probe = 1; probe <= WORD_PROBES; probe++, at = (at + 1) & mask) {
        WordSlot *slot = &cache->slots[at];
        int found = slot->hash == 0;
        if (!found && slot->hash == hash && slot->key_length == length) {
            const int32_t *key = cache->keys.items + slot->key;
            Py_ssize_t k = 0;
            while (k < length && (Py_UCS4)key[k] == PyUnicode_READ(kind, data, start + k)) k++;
            found = k == length;
        }
        if (found) {
            cache->probes += probe;
            return slot;
        }
    }
    cache->probes += WORD_PROBES;
    return NULL;
}

static int word_cache_grow(WordCache *cache) {
    Py_ssize_t capacity = cache->capacity ? cache->capacity * 2 : 1024;
    if (capacity > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(WordSlot)) {
        PyErr_NoMemory();
        return -1;
    }
    WordSlot *slots = PyMem_Calloc((size_t)capacity, sizeof(WordSlot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < cache->capacity; i++) {
        WordSlot *old = &cache->slots[i];
        if (old->hash == 0) continue;
        Py_ssize_t at = (Py_ssize_t)(old->hash & (uint64_t)(capacity - 1));
        while (slots[at].hash != 0) at = (at + 1) & (capacity - 1);
        slots[at] = *old;
    }
    PyMem_Free(cache->slots);
    cache->slots = slots;
    cache->capacity = capacity;
    return 0;
}

/* Ask ``miss`` for the word text[start:end] (bytes of native int32 ids), append them to ``out`` and keep them where
 * the word's probe run has room: in ``slot``, the empty slot word_find gave (NULL: none), unless the table grows.
 * ``miss`` cannot change the cache (``busy``: no encode or clear meanwhile).  0, or -1 on an error. */
static int word_add(WordCache *cache, uint64_t hash, PyObject *text, Py_ssize_t start, Py_ssize_t end,
                    PyObject *miss, Int32s *out, WordSlot *slot) {
    PyObject *word = PyUnicode_Substring(text, start, end);
    if (word == NULL) return -1;
    PyObject *ids = PyObject_CallOneArg(miss, word);
    Py_DECREF(word);
    if (ids == NULL) return -1;
    int status = -1;
    if (!PyBytes_Check(ids) || PyBytes_GET_SIZE(ids) % (Py_ssize_t)sizeof(int32_t) != 0 ||
        PyBytes_GET_SIZE(ids) / (Py_ssize_t)sizeof(int32_t) > INT32_MAX || end - start > INT32_MAX) {
        PyErr_SetString(PyExc_TypeError, "byte_level_encode: a word's ids are not bytes of int32");
        goto done;
    }
    Py_ssize_t count = PyBytes_GET_SIZE(ids) / (Py_ssize_t)sizeof(int32_t);
    if (int32s_add(out, (const int32_t *)PyBytes_AS_STRING(ids), count) < 0) goto done;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    if ((cache->count + 1) * 2 > cache->capacity) {
        if (word_cache_grow(cache) < 0) goto done;
        slot = word_find(cache, hash, kind, data, start, end);  /* empty (the word was not there), or NULL */
    }
    if (slot == NULL) {
        cache->unkept++;
        status = 0;
        goto done;
    }
    if (int32s_reserve(&cache->keys, end - start) < 0 || int32s_reserve(&cache->ids, count) < 0) goto done;
    slot->hash = hash;
    slot->key = cache->keys.used;
    slot->key_length = (int32_t)(end - start);
    for (Py_ssize_t i = start; i < end; i++) cache->keys.items[cache->keys.used++] = (int32_t)PyUnicode_READ(kind, data, i);
    slot->ids = cache->ids.used;
    slot->id_count = (int32_t)count;
    memcpy(cache->ids.items + cache->ids.used, PyBytes_AS_STRING(ids), (size_t)count * sizeof(int32_t));
    cache->ids.used += count;
    cache->count++;
    status = 0;
done:
    Py_DECREF(ids);
    return status;
}

/* One text's pre-tokens' ids appended to ``out``.  Returns 1 when the text holds a character the table cannot
 * vouch for (nothing appended; the caller asks HF), 0 when encoded, -1 on an error. */
static int encode_one(PyObject *text, const uint8_t *classes, WordCache *cache, PyObject *miss, Int32s *out) {
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (kind != PyUnicode_1BYTE_KIND) {  /* Latin-1 text holds only characters every table classes */
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (c >= CHAR_CLASSES || classes[c] == CHAR_UNSURE) return 1;
        }
    }
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t end = pre_token_end(kind, data, n, i, classes);
        uint64_t hash = word_hash(kind, data, i, end);
        cache->lookups++;
        WordSlot *slot = word_find(cache, hash, kind, data, i, end);
        if (slot != NULL && slot->hash != 0) {
            if (int32s_add(out, cache->ids.items + slot->ids, slot->id_count) < 0) return -1;
        } else if (word_add(cache, hash, text, i, end, miss, out, slot) < 0) {
            return -1;
        }
        i = end;
    }
    return 0;
}

/* common.tokenization.fast_bpe: ``texts`` (a list of str) cut into byte-level BPE pre-tokens, each pre-token's ids
 * from the word ``cache`` (word_cache()) or else from ``miss`` (a callable: the word -> bytes of native int32 ids).
 * Returns (bytes of int32 ids, bytes of int64 lengths); a text the class table cannot vouch for gets length -1 and
 * no ids (the caller encodes it with HF). */
static PyObject *byte_level_encode(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *texts, *capsule, *miss;
    Py_buffer classes;
    if (!PyArg_ParseTuple(args, "O!y*OO", &PyList_Type, &texts, &classes, &capsule, &miss)) return NULL;
    PyObject *result = NULL;
    Int32s out = {NULL, 0, 0};
    Py_ssize_t count = PyList_GET_SIZE(texts);
    int64_t *lengths = NULL;
    WordCache *cache = word_cache_of(capsule);
    if (cache == NULL) goto release;
    if (cache->busy) {
        PyErr_SetString(PyExc_RuntimeError, "byte_level_encode: the word cache is in use (a miss called back)");
        goto release;
    }
    if (classes.len != CHAR_CLASSES) {
        PyErr_Format(PyExc_ValueError, "byte_level_encode: the class table holds %zd bytes, %d needed", classes.len,
                     CHAR_CLASSES);
        goto release;
    }
    if (!PyCallable_Check(miss)) {
        PyErr_SetString(PyExc_TypeError, "byte_level_encode: miss is not callable");
        goto release;
    }
    lengths = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(int64_t));
    if (lengths == NULL) {
        PyErr_NoMemory();
        goto release;
    }
    cache->busy = 1;
    for (Py_ssize_t t = 0; t < count; t++) {
        PyObject *text = PyList_GET_ITEM(texts, t);
        if (!PyUnicode_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "byte_level_encode: a text is not a str");
            goto done;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(text) < 0) goto done;  /* a legacy str (deprecated C API) has no code points yet */
#endif
        Py_INCREF(text);  /* miss runs Python code, which could change the list */
        Py_ssize_t before = out.used;
        int status = encode_one(text, (const uint8_t *)classes.buf, cache, miss, &out);
        Py_DECREF(text);
        if (status < 0) goto done;
        lengths[t] = status ? -1 : (int64_t)(out.used - before);
        if (count != PyList_GET_SIZE(texts)) {
            PyErr_SetString(PyExc_RuntimeError, "byte_level_encode: the list of texts changed");
            goto done;
        }
    }
    /* y# of a NULL pointer is None: no ids (no text, or only empty ones) is b"" */
    result = Py_BuildValue("(y#y#)", out.items ? (const char *)out.items : "", out.used * (Py_ssize_t)sizeof(int32_t),
                           (const char *)lengths, count * (Py_ssize_t)sizeof(int64_t));
done:
    cache->busy = 0;
release:
    PyMem_Free(out.items);
    PyMem_Free(lengths);
    PyBuffer_Release(&classes);
    return result;
}

/* ------------------------------------------------------------------------------------------------ module */

static PyObject *crc32c_masked(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    uint32_t crc = masked_crc(data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"plan_instances", plan_instances, METH_VARARGS, "BERT's and ALBERT's plan of one pass, Python's draws."},
    {"pair_layout", pair_layout, METH_VARARGS, "BERT's [CLS] A [SEP] B [SEP] layout of planned instances."},
    {"select_tokens", select_tokens, METH_VARARGS, "Selection sampling of masked positions from given draws."},
    {"apply_masks", apply_masks, METH_VARARGS, "The 80/10/10 replacement and the prediction features."},
    {"encode_records", encode_records, METH_VARARGS, "TFRecord-framed tf.train.Example records."},
    {"crc32c_masked", crc32c_masked, METH_VARARGS, "TFRecord's masked CRC32C of a buffer."},
    {"cut_segments", cut_segments, METH_VARARGS, "A document's text cut at its sentence starts, as segments."},
    {"cut_at_bytes", cut_at_bytes, METH_VARARGS, "A document's text cut at Bling Fire's byte starts, or None."},
    {"select_ngrams", select_ngrams, METH_VARARGS, "ALBERT's n-gram selection from given draws."},
    {"byte_level_encode", byte_level_encode, METH_VARARGS, "Texts as byte-level BPE pre-tokens' cached ids."},
    {"word_cache", word_cache, METH_NOARGS, "An empty word cache for byte_level_encode."},
    {"word_cache_size", word_cache_size, METH_O, "A word cache's (words, bytes)."},
    {"word_cache_clear", word_cache_clear, METH_O, "Empty a word cache."},
    {"word_cache_probes", word_cache_probes, METH_O, "A word cache's (lookups, slots probed, words not kept)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_kernels", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__kernels(void) {
    crc_init();
    if (has_hard_crc()) crc32c_of = crc32c_hard;
    PyObject *created = PyModule_Create(&module);
#ifdef KERNELS_SOURCE_SHA256  /* setup.py: the sha256 of this file, checked by common/kernels.py */
    if (created != NULL && PyModule_AddStringConstant(created, "SOURCE_SHA256", KERNELS_SOURCE_SHA256) < 0)
        Py_CLEAR(created);
#endif
    if (created != NULL && PyModule_AddIntConstant(created, "WORD_PROBES", WORD_PROBES) < 0) Py_CLEAR(created);
    return created;
}
