/* json.h — a strict JSON parser (RFC 8259) for request bodies that builds ordinary
 * cJSON trees, so the code reading them stays plain cJSON.
 *
 * What it adds over cJSON_Parse: the exact grammar (no leading zeros, no "1.", no
 * trailing bytes, no raw control characters in strings), duplicate keys rejected,
 * U+0000 rejected (cJSON strings are NUL-terminated: "a\u0000b" would silently become
 * "a"), lone UTF-16 surrogates and invalid UTF-8 rejected, a nesting limit, and an
 * error that says what and where (byte, line, column, and the path of the value).
 *
 * Numbers keep their source text: a number node's `valuestring` holds its literal
 * (cJSON_Delete frees and cJSON_Duplicate copies `valuestring` on every node type, and
 * nothing in cJSON reads it on a number), so json_int64() reads integers exactly
 * instead of through a double that is exact only up to 2^53. `valuedouble` is set as
 * cJSON sets it (strtod; 1e400 -> inf). Code that changes a number node in place must
 * clear its valuestring (nothing in inferd does).
 *
 * json_write() writes a tree back out (numbers by their literal when they have one,
 * so a tree parsed here and written again keeps every integer exact).
 *
 * What it does not do: streaming, comments, NaN/Infinity. Any thread; no shared state. */
#ifndef INFERD_SERVER_JSON_H
#define INFERD_SERVER_JSON_H
#include "../util/layer/server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define JSON_DEFAULT_MAX_DEPTH 128 /* serde_json's default recursion limit */
#define JSON_HARD_MAX_DEPTH 1000   /* the parser recurses once per level */

typedef enum json_status {
    JSON_OK = 0,
    JSON_ERR_SYNTAX,    /* not JSON */
    JSON_ERR_ENCODING,  /* the input is not valid UTF-8 */
    JSON_ERR_DEPTH,     /* arrays/objects nested deeper than max_depth */
    JSON_ERR_DUPLICATE, /* an object has the same key twice */
    JSON_ERR_NUL,       /* a string or key holds U+0000 */
    JSON_ERR_NOMEM,
} json_status;

/* May this object key be shown to the client in an error's path / message? Keys it
 * refuses end the path there (and are never quoted), so error text never echoes
 * arbitrary input. NULL: show no key at all. */
typedef bool (*json_key_ok)(const char *key);

typedef struct json_opts {
    int max_depth;     /* 0 = JSON_DEFAULT_MAX_DEPTH; capped at JSON_HARD_MAX_DEPTH */
    json_key_ok key_ok;
} json_opts;

typedef struct json_error {
    json_status status;
    const char *what;     /* static: "expected ':'", "duplicate key", ... */
    size_t offset;        /* byte offset of the problem in the input */
    size_t line, column;  /* 1-based; the column counts characters */
    char path[128];       /* where: "messages[0].content"; "" = the top level or unknown */
    char key[64];         /* JSON_ERR_DUPLICATE: the key, when key_ok accepts it and it fits; else "" */
} json_error;

/* Parse n bytes (need not be NUL-terminated) into a tree the caller frees with
 * cJSON_Delete. Only JSON whitespace may surround the value. Returns NULL with *err
 * filled on any error. opts may be NULL (defaults). */
cJSON *json_parse(const char *s, size_t n, const json_opts *opts, json_error *err);

/* The source text of a number parsed by json_parse; NULL for other nodes and for
 * numbers that came from elsewhere (cJSON_Parse, cJSON_CreateNumber). */
const char *json_number_literal(const cJSON *v);

typedef enum json_int_status {
    JSON_INT_OK = 0,
    JSON_INT_NOT_INTEGER, /* not a number, or a number with a fractional part (1.5, 1e-1) */
    JSON_INT_RANGE,       /* integral, but outside int64 */
} json_int_status;

/* The exact integer value of a number node. Integral values in any JSON form count
 * (1.0, 1e2, -0, 12.5e1); any nonzero fractional part, however small, does not
 * (1.0000000000000001 is not 1). Without a literal (a tree not from json_parse) the
 * double is all there is: integral doubles in [-2^63, 2^63) convert. */
json_int_status json_int64(const cJSON *v, int64_t *out);

struct sbuf;
/* v as compact JSON appended to out: numbers by their literal (json_parse's) or, for
 * nodes made elsewhere, integral doubles as integers and others with 17 digits;
 * strings through sbuf_json_str (invalid UTF-8 repaired); a cJSON_Raw node verbatim.
 * Recurses once per nesting level. */
void json_write(struct sbuf *out, const cJSON *v);

#endif
